"""Regenerate the public-trace samples: raw slices copied from ../shared/traces and their imports.

Usage: .venv/bin/python samples/make_public_slices.py [--traces DIR]
Copies (unchanged bytes, whole lines) and imports with `llmreplay import`, so a diff shows any change.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from llmreplay.importers.pipeline import ImportConfig, import_trace_file

SAMPLES = Path(__file__).resolve().parent
DEFAULT_TRACES = SAMPLES.parent.parent / "shared" / "traces"
MOONCAKE_ROWS = 400

# (source file under the traces dir, slice written under samples/public/, rows kept or None for all)
SLICES = (
    ("mooncake/conversation_trace.jsonl", "mooncake_conversation_head400.jsonl", MOONCAKE_ROWS),
    ("burstgpt/burstgpt3_slice.csv", "burstgpt_v2_sessions.csv", None),
)
LICENCES = (
    ("mooncake/LICENSE-APACHE", "LICENSE-mooncake-Apache-2.0.txt"),
    ("burstgpt/LICENSE", "LICENSE-burstgpt-CC-BY-4.0.txt"),
)
IMPORTS = (
    ("mooncake", "mooncake_conversation_head400.jsonl", "mooncake_conversation.parquet"),
    ("burstgpt", "burstgpt_v2_sessions.csv", "burstgpt_v2_sessions.parquet"),
)


def copy_head(source: Path, target: Path, rows: int | None) -> None:
    """The first `rows` lines (data rows; a CSV header is kept on top), bytes unchanged."""
    with open(source, "rb") as handle:
        lines = handle.readlines()
    keep = lines if rows is None else lines[: rows + (1 if source.suffix == ".csv" else 0)]
    target.write_bytes(b"".join(keep))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=Path, default=DEFAULT_TRACES)
    args = parser.parse_args()
    public = SAMPLES / "public"
    public.mkdir(exist_ok=True)
    for source, target, rows in SLICES:
        copy_head(args.traces / source, public / target, rows)
    for source, target in LICENCES:
        shutil.copyfile(args.traces / source, public / target)
    for kind, raw, trace in IMPORTS:
        config = ImportConfig(source=kind, input_path=public / raw, output_path=SAMPLES / trace, force=True)
        summary = import_trace_file(config)
        skipped = f" ({summary.skipped_line})" if summary.skipped_line else ""
        print(f"{SAMPLES / trace}: {summary.requests} requests, {summary.sessions} sessions{skipped}")


if __name__ == "__main__":
    main()
