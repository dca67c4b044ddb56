"""One definition of the latency metrics, applied alike to recorded traces and replay results.

- TTFT: request start -> first chunk carrying content or a tool-call delta (`ttft_ns`).
- ITL: gaps between consecutive content chunks (`chunk_offsets_ns` diffs), pooled over requests.
- TPOT: (E2E - TTFT) / (completion tokens - 1), per request with at least 2 output tokens.
- E2E: request start -> last byte (`e2e_ns`).
Request start is the gateway arrival in a trace and the actual send in a replay run.
Only successful requests count for latency; failures are reported apart, by kind.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

PERCENTILES = (50, 90, 95, 99)
LATENCY_METRICS = ("ttft", "tpot", "itl", "e2e")


def success_mask(table: pa.Table) -> np.ndarray:
    """Requests that completed: no error kind and (when known) an HTTP 2xx status."""
    no_error = pc.is_null(table.column("error_kind"))
    status = table.column("http_status")
    ok_status = pc.fill_null(pc.and_(pc.greater_equal(status, 200), pc.less(status, 300)), True)
    return np.asarray(pc.and_(no_error, ok_status).to_numpy(zero_copy_only=False), dtype=bool)


def _as_float(column) -> np.ndarray:
    return np.asarray(pc.cast(column, pa.float64()).to_numpy(zero_copy_only=False), dtype=float)


def per_request_latencies_ns(table: pa.Table) -> dict[str, np.ndarray]:
    """TTFT, TPOT and E2E per request in ns (NaN where undefined or the request failed)."""
    ok = success_mask(table)
    ttft = _as_float(table.column("ttft_ns"))
    e2e = _as_float(table.column("e2e_ns"))
    tokens = _as_float(table.column("completion_tokens"))
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(tokens > 1, (e2e - ttft) / (tokens - 1), np.nan)
    return {
        "ttft": np.where(ok, ttft, np.nan),
        "tpot": np.where(ok, tpot, np.nan),
        "e2e": np.where(ok, e2e, np.nan),
    }


def itl_values_ns(table: pa.Table) -> np.ndarray:
    """Inter-chunk gaps of successful streamed requests, pooled (ns)."""
    offsets = table.column("chunk_offsets_ns").filter(pa.array(success_mask(table)))
    gaps = []
    for chunk in offsets.chunks:
        lists = chunk.drop_null() if chunk.null_count else chunk
        if len(lists) == 0:
            continue
        values = np.asarray(lists.flatten().to_numpy(zero_copy_only=False), dtype=float)
        bounds = np.asarray(lists.offsets.to_numpy(), dtype=np.int64) - lists.offsets[0].as_py()
        diffs = np.diff(values)
        # drop the diffs that straddle two requests
        keep = np.ones(len(diffs), dtype=bool)
        straddle = bounds[1:-1] - 1
        keep[straddle[(straddle >= 0) & (straddle < len(diffs))]] = False
        gaps.append(diffs[keep])
    return np.concatenate(gaps) if gaps else np.empty(0)


def percentiles(values: np.ndarray, qs=PERCENTILES) -> dict[str, float | None]:
    """Linear-interpolated percentiles of the finite values; None when there are none."""
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        return {f"p{q}": None for q in qs}
    points = np.percentile(finite, qs)
    return {f"p{q}": float(v) for q, v in zip(qs, points, strict=True)}


def latency_summary_ms(
    table: pa.Table, qs=PERCENTILES, itl_ms: dict | None = None
) -> dict[str, dict[str, float | None]]:
    """Percentiles of each latency metric in milliseconds, plus the sample count.

    `itl_ms`: the ITL entry computed elsewhere (a replay run streams it from its file rather than
    holding every gap); `table` then needs no `chunk_offsets_ns`."""
    per_request = per_request_latencies_ns(table)
    summary = {}
    for name in LATENCY_METRICS:
        if name == "itl" and itl_ms is not None:
            summary[name] = itl_ms
            continue
        values = (itl_values_ns(table) if name == "itl" else per_request[name]) / 1e6
        summary[name] = {"count": int(np.isfinite(values).sum()), **percentiles(values, qs)}
    return summary
