"""Latency cells: every metric at every percentile on both sides, the ratio, its paired-bootstrap CI
(replayer.compare.paired: a side compared with itself gets 1, CI [1, 1]) and the verdict; a cell
flagged `few_samples` on either side (replayer.measured.samples) calls no change significant
(inconclusive): a bootstrap cannot see past the largest values it has."""

from __future__ import annotations

import math

import numpy as np

import replayer.compare.paired as compare_paired
import replayer.judge.stats as judge_stats
from llmreplay.metrics import GATING, METRICS, PERCENTILES, LatencyMetric
from replayer.compare.config import CellSettings
from replayer.measured.samples import MIN_TAIL_SAMPLES, Samples, distribution


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
