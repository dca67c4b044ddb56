"""capacity.json: its format name and version, the one writer (atomic, llmreplay.output_paths.publish)
and the reader a rerun checks its settings against (docs/capacity-format.md)."""

from __future__ import annotations

from pathlib import Path

import orjson

from llmreplay.errors import BadInput
from llmreplay.output_paths import publish, temp_path
from replayer.capacity.config import IDENTITY

FORMAT = "llmreplay.capacity"
FORMAT_VERSION = "1.1"
READABLE_MAJOR = "1"
CAPACITY_FILE = "capacity.json"


def write_capacity(out_dir: Path, document: dict) -> Path:
    path = Path(out_dir) / CAPACITY_FILE
    tmp = temp_path(path)
    tmp.write_bytes(orjson.dumps(document, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY))
    publish(tmp, path)
    return path


def read_capacity(out_dir: Path) -> dict | None:
    """The capacity.json of an earlier run into `out_dir`, None when there is none; BadInput when unreadable."""
    path = Path(out_dir) / CAPACITY_FILE
    if not path.is_file():
        return None
    try:
        document = orjson.loads(path.read_bytes())
    except orjson.JSONDecodeError as exc:
        raise BadInput(
            f"-o {out_dir}: {CAPACITY_FILE} is not JSON ({exc}); choose a new -o directory"
        ) from None
    version = str(document.get("format_version", "")) if isinstance(document, dict) else ""
    if (
        not isinstance(document, dict)
        or document.get("format") != FORMAT
        or version.split(".")[0] != READABLE_MAJOR
    ):
        raise BadInput(
            f"-o {out_dir}: {CAPACITY_FILE} is not a {FORMAT} {READABLE_MAJOR}.x file; choose a new -o directory"
        )
    return document


def refuse_changed(previous: dict | None, settings: dict, out_dir: Path) -> None:
    """A rerun continues the search only with the same trace, target, SLOs, axis, window and warm-up."""
    if previous is None:
        return
    before = previous.get("settings") or {}
    changed = [name for name in IDENTITY if before.get(name) != settings.get(name)]
    if changed:
        name = changed[0]
        raise BadInput(
            f"-o {out_dir}: holds a capacity search with another {name} ({before.get(name)!r}, now "
            f"{settings.get(name)!r}); rerun with the same settings to continue it, or choose a new -o directory"
        )
