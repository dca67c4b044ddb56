"""The shape of a trace at a glance: rates, lengths, mix, sessions, prefix sharing, latencies.

Pure functions over an Arrow table of trace rows; `llmreplay inspect` prints the result.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from llmreplay.metrics import latency_summary_ms, percentiles
from llmreplay.trace_arrow import float_values

SHAPE_PERCENTILES = (50, 90, 99)


def _numpy(column, dtype=float) -> np.ndarray:
    return np.asarray(float_values(column), dtype=dtype)


def arrival_seconds(table: pa.Table) -> np.ndarray:
    """Arrival offsets from the first request, in seconds."""
    us = np.asarray(pc.cast(table.column("arrival_time"), pa.int64()).to_numpy(zero_copy_only=False))
    return (us - us.min()) / 1e6 if len(us) else np.empty(0)


def peak_rate(offsets_s: np.ndarray, window_s: float) -> float:
    """Highest number of arrivals in any fixed window (aligned to the first arrival), per second."""
    if offsets_s.size == 0:
        return 0.0
    # np.unique, not np.bincount: memory by arrivals, not by windows (a trace may span years)
    _, counts = np.unique((offsets_s // window_s).astype(np.int64), return_counts=True)
    return float(counts.max() / window_s)


def prefix_sharing_ratio(hashes: pa.ChunkedArray | pa.Array) -> float:
    """Share of prompt blocks whose chained hash was seen in an earlier request (cacheable blocks).

    Every occurrence after a hash's first is a block seen before, so the ratio is
    (all blocks - distinct blocks) / all blocks.
    """
    flat = pc.list_flatten(hashes)
    total = len(flat)
    return (total - len(pc.unique(flat))) / total if total else 0.0


def _share(mask) -> float:
    values = np.asarray(mask, dtype=bool)
    return float(values.mean()) if values.size else 0.0


def _rounded(stats: dict[str, float | None]) -> dict[str, float | None]:
    return {k: (round(v, 3) if isinstance(v, float) else v) for k, v in stats.items()}


def _counts(column) -> dict[str, int]:
    """Rows per value, commonest first (nulls left out)."""
    found = pc.value_counts(pc.drop_null(column)).to_pylist() if len(column) else []
    return {v["values"]: v["counts"] for v in sorted(found, key=lambda v: (-v["counts"], v["values"]))}


def describe_trace(table: pa.Table) -> dict:
    """Everything `inspect` reports, as plain JSON-able values."""
    n = table.num_rows
    offsets = arrival_seconds(table)
    span_s = float(offsets.max()) if n else 0.0
    sessions = table.column("session_id")
    with_session = pc.drop_null(sessions)
    turns = pc.value_counts(with_session).field("counts") if len(with_session) else pa.array([], pa.int64())
    think_ms = _numpy(pc.drop_null(table.column("think_time_ns"))) / 1e6
    has_timings = (
        pc.sum(pc.is_valid(table.column("ttft_ns"))).as_py()
        or pc.sum(pc.is_valid(table.column("e2e_ns"))).as_py()
    )
    errors = pc.value_counts(pc.drop_null(table.column("error_kind"))).to_pylist() if n else []
    return {
        "requests": n,
        "span_s": round(span_s, 3),
        "rate_per_s": {
            "mean": round((n - 1) / span_s, 4) if span_s > 0 else None,
            "peak_1s": peak_rate(offsets, 1.0),
            "peak_1min": round(peak_rate(offsets, 60.0), 4),
        },
        "prompt_tokens": _rounded(percentiles(_numpy(table.column("prompt_tokens")), SHAPE_PERCENTILES)),
        "completion_tokens": _rounded(
            percentiles(_numpy(table.column("completion_tokens")), SHAPE_PERCENTILES)
        ),
        "reasoning_tokens": _rounded(
            percentiles(_numpy(table.column("reasoning_tokens")), SHAPE_PERCENTILES)
        ),
        "share": {
            "stream": round(_share(table.column("stream").to_numpy(zero_copy_only=False)), 4),
            "tools": round(_share(_numpy(table.column("tools_count")) > 0), 4),
            "structured_output": round(
                _share(np.asarray(table.column("structured_output").to_pylist()) != "none"), 4
            ),
            "errors": round(
                _share(pc.is_valid(table.column("error_kind")).to_numpy(zero_copy_only=False)), 4
            ),
        },
        "errors_by_kind": {e["values"]: e["counts"] for e in errors},
        "endpoints": _counts(table.column("endpoint")),  # the API mix: chat, Responses, Messages, ...
        "server_state": _counts(table.column("server_state")),  # chained Responses turns (format 1.3)
        "sessions": {
            "count": len(turns),
            "requests_in_sessions": len(with_session),
            "turns_per_session": _rounded(percentiles(_numpy(turns), SHAPE_PERCENTILES)),
            "think_time_ms": _rounded(percentiles(think_ms, SHAPE_PERCENTILES)),
        },
        "prefix_sharing_ratio": round(prefix_sharing_ratio(table.column("prefix_block_hashes")), 4),
        "latency_ms": (
            {k: _rounded(v) for k, v in latency_summary_ms(table, SHAPE_PERCENTILES).items()}
            if has_timings
            else None
        ),
    }
