"""Latency cells: every metric at every percentile on both sides, the ratio, its paired-bootstrap CI
(replayer.compare.paired: a side compared with itself gets 1, CI [1, 1]) and the verdict; a cell
with fewer than MIN_TAIL_SAMPLES values beyond its percentile is flagged `few_samples` and calls no
change significant (inconclusive): a bootstrap cannot see past the largest values it has."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

import replayer.compare.paired as compare_paired
import replayer.judge.stats as judge_stats
from llmreplay.metrics import GATING, METRICS, PERCENTILES, LatencyMetric
from replayer.compare.config import CellSettings
from replayer.compare.requests import RequestColumns

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


def latency_rows(
    b: Samples | None,
    c: Samples,
    clusters: int,
    settings: CellSettings,
    rng: np.random.Generator,
    c_label: str = "candidate",
    counts: np.ndarray | None = None,
) -> dict:
    """Per metric: the candidate's (and baseline's) distribution and, with a baseline, one
    comparison per percentile. `clusters`: how many requests the sides share; `counts`: a
    compare_paired.resample_counts matrix reused by every metric (small comparisons)."""
    rows = {}
    for metric in METRICS:
        name = metric.name
        row = {c_label: distribution(c.sorted[name], metric.percentiles)}
        if b is not None:
            row["baseline"] = distribution(b.sorted[name], metric.percentiles)
            row["comparison"] = _comparison(metric, b, c, clusters, settings, rng, counts)
            for q, cell in row["comparison"].items():
                cell["few_samples"] = q in row["baseline"]["few_samples"] or q in row[c_label]["few_samples"]
                if cell["few_samples"] and cell["verdict"] in _SIGNIFICANT:
                    cell["verdict"] = judge_stats.INCONCLUSIVE
        rows[name] = row
    return rows


_SIGNIFICANT = (judge_stats.REGRESSION, judge_stats.IMPROVEMENT)  # what few samples cannot show
_FLIPPED = {
    judge_stats.REGRESSION: judge_stats.IMPROVEMENT,
    judge_stats.IMPROVEMENT: judge_stats.REGRESSION,
}


def _comparison(
    metric: LatencyMetric, b: Samples, c: Samples, clusters: int, settings: CellSettings, rng, counts
) -> dict:
    """The candidate/baseline ratio at each of the metric's percentiles, its paired CI and verdict."""
    name = metric.name
    qs = tuple(q / 100 for q in metric.percentiles)
    n_eff = _effective_sizes(metric, b, c, settings.block_requests)
    draws = compare_paired.paired_ratio_draws(
        (b.values[name], b.cluster[name]),
        (c.values[name], c.cluster[name]),
        clusters,
        qs,
        rng,
        settings.draws,
        *n_eff,
        counts=counts,
        sorted_values=(b.sorted[name], c.sorted[name]),
    )
    cells = {}
    for q, level in zip(metric.percentiles, qs, strict=True):
        estimate = judge_stats.ratio_estimate(
            b.sorted[name], c.sorted[name], level, draws[level], settings.confidence
        )
        verdict = judge_stats.latency_verdict(estimate, settings.tolerance)
        if not metric.lower_is_better:
            verdict = _FLIPPED.get(verdict, verdict)
        if settings.refused and verdict != judge_stats.NO_DATA:
            verdict = judge_stats.DIFFERENT_LOAD
        cells[f"p{q}"] = {
            "ratio": estimate.ratio,
            "ci_low": estimate.ci_low,
            "ci_high": estimate.ci_high,
            "verdict": verdict,
        }
    return cells


def _effective_sizes(metric: LatencyMetric, b: Samples, c: Samples, block: int) -> tuple:
    """Each side's independent draws behind the metric, for the copula path: pooled ITL gaps count
    their requests, and blocks of correlated requests count once per `block` requests."""
    name = metric.name
    if metric.per_gap:
        return (max(1, b.itl_requests // block), max(1, c.itl_requests // block))
    if block <= 1:
        return (None, None)
    return (max(1, b.values[name].size // block), max(1, c.values[name].size // block))


def sample_warnings(latency: dict, labels: list[str]) -> list[str]:
    """One line per set of metrics that some side has too few values for, with the percentiles concerned."""
    groups: dict[tuple[str, ...], list[int]] = {}
    for q in PERCENTILES:
        short = []
        for metric in GATING:  # a metric that is never judged needs no caution
            name = metric.name
            if any(f"p{q}" in latency[name][label]["few_samples"] for label in labels):
                counts = " / ".join(f"{latency[name][label]['count']:,}" for label in labels)
                short.append(f"{name} ({counts})")
        if short:
            groups.setdefault(tuple(short), []).append(q)
    lines = []
    for short, percentiles in groups.items():
        names = ", ".join(f"p{q}" for q in percentiles)
        needed = ", ".join(f"{math.ceil(MIN_TAIL_SAMPLES / (1 - q / 100) - 1e-9):,}" for q in percentiles)
        lines.append(
            f"too few values for {names} (at least {needed} needed: {MIN_TAIL_SAMPLES} beyond the percentile): "
            f"{', '.join(short)}; read {'it' if len(percentiles) == 1 else 'them'} as indicative"
        )
    return lines
