"""One definition of the latency metrics, applied alike to recorded traces and replay results: METRICS is
the table every report, comparison, SLO and verdict iterates (adding a metric = a row and its test).
ns inside, ms on display; start is the gateway arrival or the actual send; only successes count."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

PERCENTILES = (50, 90, 95, 99)


def _column_ns(name: str) -> Callable[[pa.Table], np.ndarray]:
    def values(table: pa.Table) -> np.ndarray:
        if name not in table.column_names:
            return np.full(table.num_rows, np.nan)
        return _as_float(table.column(name))

    return values


def _ttfo_ns(table: pa.Table) -> np.ndarray:
    """TTFO of the requests that reasoned; for the others it is their TTFT, judged once, as TTFT."""
    if "reasoning_tokens" not in table.column_names:
        return np.full(table.num_rows, np.nan)
    reasoned = np.nan_to_num(_as_float(table.column("reasoning_tokens"))) > 0
    return np.where(reasoned, _column_ns("ttfo_ns")(table), np.nan)


def _tpot_ns(table: pa.Table) -> np.ndarray:
    ttft, e2e = _as_float(table.column("ttft_ns")), _as_float(table.column("e2e_ns"))
    tokens = _as_float(table.column("completion_tokens"))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(tokens > 1, (e2e - ttft) / (tokens - 1), np.nan)


@dataclass(frozen=True, slots=True)
class LatencyMetric:
    name: str  # the key in every report and the --slo prefix (ttft_p95<=500ms)
    title: str
    columns: tuple[str, ...]  # the result/trace columns it is computed from
    definition: str
    per_request: Callable[[pa.Table], np.ndarray] | None  # ns per row; None: one value per chunk gap
    streamed_only: bool = True  # a non-streamed answer arrives in one piece: only E2E applies to it
    from_start: bool = True  # measured from the request's start: the from-schedule view adds dispatch lag
    gates: bool = True  # its percentiles take part in the verdict (False: shown, never judged)
    percentiles: tuple[int, ...] = PERCENTILES
    lower_is_better: bool = True
    unit: str = "ms"  # shown in; computed in ns

    @property
    def per_gap(self) -> bool:
        """Pooled over chunk gaps (ITL): no single value per request, so no goodput or paired ratio."""
        return self.per_request is None


METRICS: tuple[LatencyMetric, ...] = (
    LatencyMetric(
        "ttft",
        "TTFT",
        ("ttft_ns",),
        "request start -> first chunk carrying generated tokens on any channel, reasoning included "
        "(streamed requests only)",
        _column_ns("ttft_ns"),
    ),
    LatencyMetric(
        "ttfo",
        "TTFO",
        ("ttfo_ns", "reasoning_tokens"),
        "request start -> first answer chunk (content, refusal or a tool-call delta), of streamed "
        "requests that reasoned (without reasoning it is the TTFT)",
        _ttfo_ns,
    ),
    LatencyMetric(
        "tpot",
        "TPOT",
        ("e2e_ns", "ttft_ns", "completion_tokens"),
        "(E2E - TTFT) / (output tokens - 1), streamed requests with at least 2 output tokens",
        _tpot_ns,
        from_start=False,
    ),
    LatencyMetric(
        "itl",
        "ITL",
        ("chunk_offsets_ns",),
        "gap between consecutive chunks carrying generated tokens, reasoning included, of a streamed "
        "request (all gaps pooled)",
        None,
        from_start=False,
    ),
    LatencyMetric(
        "e2e",
        "E2E",
        ("e2e_ns",),
        "request start -> last byte of the response",
        _column_ns("e2e_ns"),
        streamed_only=False,
    ),
    LatencyMetric(
        "ttfb",
        "TTFB",
        ("ttfb_ns",),
        "request start -> response status line (streamed requests only); shown, not judged: a gateway "
        "and a client see headers at different points",
        _column_ns("ttfb_ns"),
        gates=False,
    ),
)
LATENCY_METRICS = tuple(m.name for m in METRICS)
BY_NAME = {m.name: m for m in METRICS}
GATING = tuple(m for m in METRICS if m.gates)
JUDGED_CELLS = sum(len(m.percentiles) for m in GATING)  # the verdict's family of latency cells


def success_mask(table: pa.Table) -> np.ndarray:
    """Requests that completed: no error kind and (when known) an HTTP 2xx status."""
    no_error = pc.is_null(table.column("error_kind"))
    status = table.column("http_status")
    ok_status = pc.fill_null(pc.and_(pc.greater_equal(status, 200), pc.less(status, 300)), True)
    return np.asarray(pc.and_(no_error, ok_status).to_numpy(zero_copy_only=False), dtype=bool)


def _as_float(column) -> np.ndarray:
    return np.asarray(pc.cast(column, pa.float64()).to_numpy(zero_copy_only=False), dtype=float)


def per_request_latencies_ns(table: pa.Table) -> dict[str, np.ndarray]:
    """Every per-request metric in ns (NaN where undefined or the request failed)."""
    ok = success_mask(table)
    return {m.name: np.where(ok, m.per_request(table), np.nan) for m in METRICS if not m.per_gap}


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
    for metric in METRICS:
        if metric.per_gap and itl_ms is not None:
            summary[metric.name] = itl_ms
            continue
        values = (itl_values_ns(table) if metric.per_gap else per_request[metric.name]) / 1e6
        summary[metric.name] = {"count": int(np.isfinite(values).sum()), **percentiles(values, qs)}
    return summary
