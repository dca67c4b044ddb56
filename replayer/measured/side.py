"""Loading one side of a comparison: a replay run directory or a recorded trace, validated at the edge.

Everything downstream (replayer.compare.sides and the reports) receives a `Side` and trusts it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from llmreplay.durations import format_duration
from llmreplay.errors import BadInput
from llmreplay.run_format import RunInfo, find_results, read_run
from llmreplay.trace_format import COMPARED_COLUMNS, LATENCY_COLUMNS

TRACE = "trace"
RUN = "run"

TRACE_COLUMNS = (*COMPARED_COLUMNS, "endpoint")  # the run carries the same names (llmreplay.run_format)


@dataclass(frozen=True, slots=True)
class Side:
    """One set of measurements: its rows, where it came from and in which clock domain it was timed."""

    label: str  # "baseline" or "candidate"
    path: Path
    kind: str  # TRACE or RUN
    table: pa.Table
    config: dict[str, Any] = field(default_factory=dict)  # run.json as written, or the trace's metadata: shown
    run: RunInfo | None = None  # a run's run.json as every decision reads it (llmreplay.run_format.read_run)
    clock_domain: str = "client"
    warmup: pa.Table | None = None  # a run's warm-up rows, kept out of `table` and every verdict (loaded: a
    # table, empty for a trace or a run without --warmup)

    @property
    def join_key(self) -> str:
        """The column naming the trace request a row stands for (replay copies share it)."""
        return "source_request_id" if self.kind == RUN else "request_id"


def load_side(path: str | Path, label: str) -> Side:
    """A run directory (results.parquet + run.json), a results.parquet file, or a trace file/directory."""
    root = Path(path)
    if not root.exists():
        raise BadInput(f"{label} {root}: no such file or directory")
    results = find_results(root)
    side = _load_run(results, label) if results else _load_trace(root, label)
    if side.table.num_rows == 0:
        raise BadInput(f"{label} {root}: empty {side.kind} (no requests)")
    return side


def _load_run(results: Path, label: str) -> Side:
    run = read_run(results, label)
    warm = run.table.column("warmup")
    measured, warmup = run.table.filter(pc.invert(warm)), run.table.filter(warm)
    return Side(label, results.parent, RUN, measured, run.document, run.info, "client", warmup)


def _load_trace(root: Path, label: str) -> Side:
    from llmreplay.trace_io import read_trace

    try:
        trace = read_trace(root, columns=TRACE_COLUMNS)
    except BadInput as exc:
        raise BadInput(f"{label} {exc}") from None
    meta = {
        "source": trace.meta.source,
        "tokenizer": trace.meta.tokenizer,
        "anonymized": trace.meta.anonymized,
        "clock_domain": trace.meta.clock_domain,
        "relative_time": trace.meta.relative_time,
        "format_version": trace.meta.format_version,
        "creator": f"{trace.meta.creator} {trace.meta.creator_version}".strip(),
        "files": [str(f) for f in trace.files],
    }
    domain = trace.meta.clock_domain or "gateway"
    return Side(label, root, TRACE, trace.table, meta, None, domain, trace.table.slice(0, 0))


def shift_latencies(side: Side, offset_ns: int) -> Side:
    """Subtract a measured network difference from TTFT, TTFB and E2E (warm-up rows too); BadInput when
    that would make any of them negative (the offset is then larger than the difference it stands for)."""
    if offset_ns == 0:
        return side
    warmup = side.warmup
    if warmup is not None and warmup.num_rows:
        warmup = _shifted(warmup, offset_ns, side.label)
    return dataclasses.replace(side, table=_shifted(side.table, offset_ns, side.label), warmup=warmup)


def _shifted(table: pa.Table, offset_ns: int, label: str) -> pa.Table:
    for name in LATENCY_COLUMNS:
        if name in table.column_names:
            smallest = pc.min(table.column(name)).as_py()
            if smallest is not None and smallest - offset_ns < 0:
                raise BadInput(
                    f"--offset-ttft {format_duration(offset_ns)}: larger than the {label}'s smallest {name[:-3]}"
                    f" ({smallest / 1e6:.3f} ms); it would make latencies negative"
                )
            shifted = pc.subtract(table.column(name), offset_ns)
            table = table.set_column(table.schema.get_field_index(name), name, pc.cast(shifted, pa.int64()))
    return table
