"""One side's latency values for some of its rows (sorted, and by request for pairing) and their
percentiles; a percentile with fewer than MIN_TAIL_SAMPLES values beyond it is flagged `few_samples`:
a bootstrap cannot see past the largest values it has."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import replayer.judge.stats as judge_stats
from llmreplay.metrics import METRICS, PERCENTILES
from replayer.measured.requests import RequestColumns

MIN_TAIL_SAMPLES = 10  # values above a percentile it needs: p99 wants 1,000, p50 20


@dataclass(frozen=True, slots=True)
class Samples:
    """One side's values of every metric for some of its rows: sorted, and by request for pairing."""

    sorted: dict[str, np.ndarray]
    values: dict[str, np.ndarray]  # finite values, in row order
    cluster: dict[str, np.ndarray]  # the request number (shared by both sides) of each value
    itl_requests: int  # requests behind the pooled ITL gaps: their effective sample size


def samples(req: RequestColumns, cluster_of_row: np.ndarray, mask: np.ndarray | None = None) -> Samples:
    """The values of the rows in `mask`; `cluster_of_row`: each row's request number."""
    mask = np.ones(len(req), dtype=bool) if mask is None else mask
    values, cluster = {}, {}
    for metric in METRICS:
        if metric.per_gap:
            keep = mask[req.itl_owner] & np.isfinite(req.itl_gaps_ns)
            values[metric.name], cluster[metric.name] = (
                req.itl_gaps_ns[keep],
                cluster_of_row[req.itl_owner[keep]],
            )
            continue
        v = req.latency_ns[metric.name]
        keep = mask & np.isfinite(v)
        values[metric.name], cluster[metric.name] = v[keep], cluster_of_row[keep]
    return Samples(
        sorted={name: np.sort(v) for name, v in values.items()},
        values=values,
        cluster=cluster,
        itl_requests=int((req.success & req.stream & mask).sum()),
    )


def few_samples(count: int, percentile: float) -> bool:
    return count * (1 - percentile / 100) < MIN_TAIL_SAMPLES


def distribution(values_sorted: np.ndarray, qs: tuple[int, ...] = PERCENTILES) -> dict:
    out: dict = {"count": int(values_sorted.size)}
    for q in qs:
        value = judge_stats.sorted_quantile(values_sorted, q / 100)
        out[f"p{q}_ms"] = None if value is None else value / 1e6
    out["few_samples"] = [f"p{q}" for q in qs if values_sorted.size and few_samples(values_sorted.size, q)]
    return out
