"""The paired bootstrap of a percentile ratio: both sides resampled by the same requests, so a run
compared with itself gets exactly 1. A Gaussian copula of exact Beta draws above EXACT_MAX_REQUESTS,
literal pair resampling below; why and how: docs/design/paired-bootstrap.md."""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

EXACT_MAX_REQUESTS = 128  # literal pair resampling up to here (and EXACT_MAX_VALUES values a side):
EXACT_MAX_VALUES = 512  # draws x values stays a few million
GRID_POINTS = 4097  # per inverse-CDF table: about 0.007 standard deviations per step
_Z_LIMIT = 8.5  # normal draws beyond +-8.5 (probability 2e-17) read the table's ends
_Z_POINTS = 4097  # z steps of 0.004
_BETA_SPAN_SD = 13.0


def score_correlation(
    b_values: np.ndarray,
    b_cluster: np.ndarray,
    b_quantile: float,
    c_values: np.ndarray,
    c_cluster: np.ndarray,
    c_quantile: float,
    q: float,
    clusters: int,
) -> float:
    """Correlation over requests (clusters, numbered 0..clusters-1) of the two sides' quantile scores.

    `*_values`: finite values; `*_cluster`: the request each belongs to (several values a request for
    pooled ITL gaps; a request absent from one side scores 0 there)."""
    s_b = quantile_scores(b_values, b_cluster, (b_quantile,), (q,), clusters)[0]
    s_c = quantile_scores(c_values, c_cluster, (c_quantile,), (q,), clusters)[0]
    return _correlation(s_b, s_c)


def quantile_scores(
    values: np.ndarray, cluster: np.ndarray, points: tuple[float, ...], qs: tuple[float, ...], clusters: int
) -> np.ndarray:
    """Per q (rows) and request (columns): the request's values at or below the q-quantile `points`
    (non-decreasing), minus q times its values. One pass over the values for every q."""
    m = len(points)
    level = np.searchsorted(np.asarray(points, dtype=float), values, side="left")  # points below each value
    counts = np.bincount(cluster * (m + 1) + level, minlength=clusters * (m + 1)).reshape(clusters, m + 1)
    at_or_below = np.cumsum(counts, axis=1)[:, :m].T  # values with level <= j: at or below points[j]
    sizes = counts.sum(axis=1)
    return at_or_below - np.asarray(qs, dtype=float)[:, None] * sizes


def _correlation(s_b: np.ndarray, s_c: np.ndarray) -> float:
    # einsum, not np.dot: no BLAS threads (waking them cost more than these sums on a busy box)
    denominator = math.sqrt(float(np.einsum("i,i->", s_b, s_b)) * float(np.einsum("i,i->", s_c, s_c)))
    if denominator == 0.0:
        return 0.0
    return min(1.0, max(-1.0, float(np.einsum("i,i->", s_b, s_c)) / denominator))


def paired_ratio_draws(
    b: tuple[np.ndarray, np.ndarray],
    c: tuple[np.ndarray, np.ndarray],
    clusters: int,
    qs: tuple[float, ...],
    rng: np.random.Generator,
    draws: int,
    b_n_eff: int | None = None,
    c_n_eff: int | None = None,
    counts: np.ndarray | None = None,
    sorted_values: tuple[np.ndarray, np.ndarray] | None = None,
) -> dict[float, np.ndarray]:
    """Replicates of candidate / baseline q-quantile under pair resampling, for each q in `qs`.

    `b`, `c`: (finite values, request number 0..clusters-1 of each value) of the two sides; `*_n_eff`
    as in paired_quantile_draws, for the copula path (the literal one resamples requests anyway).
    `counts`: a `resample_counts` matrix to reuse (the same resamples for every metric);
    `sorted_values`: both sides' values sorted, when the caller has them."""
    (b_values, b_cluster), (c_values, c_cluster) = b, c
    if clusters <= EXACT_MAX_REQUESTS and max(b_values.size, c_values.size) <= EXACT_MAX_VALUES:
        counts = resample_counts(clusters, draws, rng) if counts is None else counts
        b_draws = weighted_quantiles(b_values, b_cluster, counts, qs)
        c_draws = weighted_quantiles(c_values, c_cluster, counts, qs)
        with np.errstate(divide="ignore", invalid="ignore"):
            return {q: c_draws[q] / b_draws[q] for q in qs}
    b_sorted = np.sort(b_values) if sorted_values is None else sorted_values[0]
    c_sorted = np.sort(c_values) if sorted_values is None else sorted_values[1]
    if b_sorted.size == 0 or c_sorted.size == 0:
        return {q: np.full(draws, np.nan) for q in qs}
    b_scores = quantile_scores(b_values, b_cluster, tuple(_point(b_sorted, q) for q in qs), qs, clusters)
    c_scores = quantile_scores(c_values, c_cluster, tuple(_point(c_sorted, q) for q in qs), qs, clusters)
    out = {}
    for j, q in enumerate(qs):
        rho = _correlation(b_scores[j], c_scores[j])
        lower = correlated_normals(rho, draws, rng)
        upper = correlated_normals(rho, draws, rng)
        b_draws = paired_quantile_draws(b_sorted, q, lower[0], upper[0], b_n_eff)
        c_draws = paired_quantile_draws(c_sorted, q, lower[1], upper[1], c_n_eff)
        with np.errstate(divide="ignore", invalid="ignore"):
            out[q] = c_draws / b_draws
    return out


def resample_counts(clusters: int, draws: int, rng: np.random.Generator) -> np.ndarray:
    """How often each of `clusters` requests is drawn in each of `draws` resamples (int32, draws x clusters)."""
    picks = rng.integers(0, clusters, size=(draws, clusters))
    flat = (picks + np.arange(draws)[:, None] * clusters).ravel()
    return np.bincount(flat, minlength=draws * clusters).reshape(draws, clusters).astype(np.int32)


def weighted_quantiles(
    values: np.ndarray, cluster: np.ndarray, counts: np.ndarray, qs: tuple[float, ...]
) -> dict[float, np.ndarray]:
    """The literal paired bootstrap: per resample (row of `counts`), numpy's linear q-percentile of
    the multiset in which each value appears as often as its request was drawn (NaN: none drawn)."""
    draws = counts.shape[0]
    if values.size == 0:
        return {q: np.full(draws, np.nan) for q in qs}
    order = np.argsort(values, kind="stable")
    ordered = values[order]
    cumulative = np.cumsum(np.take(counts, cluster[order], axis=1), axis=1)  # int32: fast along rows
    total = cumulative[:, -1].astype(np.int64)
    stride = int(total.max()) + 2
    offsets = np.arange(draws, dtype=np.int64) * stride
    flat = (cumulative + offsets[:, None]).ravel()  # every row's counts, one increasing sequence
    base = np.arange(draws, dtype=np.int64) * values.size
    last = values.size - 1
    out = {}
    for q in qs:
        position = q * np.maximum(total - 1, 0)
        below = np.floor(position).astype(np.int64)
        # first element whose cumulative count exceeds `below` (and `below` + 1): 0-based ranks
        low = np.minimum(np.searchsorted(flat, below + offsets, side="right") - base, last)
        high = np.minimum(np.searchsorted(flat, below + 1 + offsets, side="right") - base, last)
        result = ordered[low] + (position - below) * (ordered[high] - ordered[low])
        out[q] = np.where(total > 0, result, np.nan)
    return out


def _point(sorted_values: np.ndarray, q: float) -> float:
    return float(_read_at(sorted_values, np.array([q * (sorted_values.size - 1)]))[0])


def correlated_normals(rho: float, draws: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """`draws` pairs of standard normals with correlation `rho` (the same array twice when rho is 1)."""
    z_b = rng.standard_normal(draws)
    if rho >= 1.0:
        return z_b, z_b
    return z_b, rho * z_b + math.sqrt(max(0.0, 1.0 - rho * rho)) * rng.standard_normal(draws)


def paired_quantile_draws(
    sorted_values: np.ndarray,
    q: float,
    lower_z: np.ndarray,
    upper_z: np.ndarray,
    effective_n: int | None = None,
) -> np.ndarray:
    """Replicates of the q-quantile of one side, from the given normals (see the module docstring).

    Same law as replayer.judge.stats.bootstrap_quantile: the linear percentile of a resample is
    read between two neighbouring order statistics; `effective_n` counts correlated values (pooled
    ITL gaps) once per request."""
    n = sorted_values.size
    if effective_n is not None and effective_n < n:
        n_eff = max(1, int(effective_n))
        rank = q * (n_eff - 1)
        levels = beta_from_normal(lower_z, rank + 1.0, n_eff - rank)
        return _read_at(sorted_values, levels * (n - 1))
    position = q * (n - 1)
    rank = int(np.floor(position)) + 1  # 1-based
    frac = position - (rank - 1)
    lower = beta_from_normal(lower_z, float(rank), float(n - rank + 1))
    low_values = sorted_values[np.minimum((lower * n).astype(np.int64), n - 1)]
    if frac == 0 or rank >= n:
        return low_values
    # Given U_(r) = u, U_(r+1) is u plus the minimum of n - r uniforms above u: Beta(1, n - r).
    upper = lower + (1.0 - lower) * (1.0 - (1.0 - normal_cdf(upper_z)) ** (1.0 / (n - rank)))
    high_values = sorted_values[np.minimum((upper * n).astype(np.int64), n - 1)]
    return low_values + frac * (high_values - low_values)


def normal_cdf(z: np.ndarray) -> np.ndarray:
    """The standard normal CDF, from Numerical Recipes' erfc (relative error below 1.2e-7 everywhere)."""
    x = np.abs(z) / math.sqrt(2.0)
    t = 1.0 / (1.0 + 0.5 * x)
    poly = -1.26551223 + t * (
        1.00002368
        + t
        * (
            0.37409196
            + t
            * (
                0.09678418
                + t
                * (
                    -0.18628806
                    + t
                    * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277))))
                )
            )
        )
    )
    tail = 0.5 * t * np.exp(-x * x + poly)  # P(Z > |z|)
    return np.where(z >= 0, 1.0 - tail, tail)


def beta_from_normal(z: np.ndarray, a: float, b: float) -> np.ndarray:
    """The Beta(a, b) quantile at level Phi(z): a table over an even z grid, read without a search."""
    table = _beta_of_normal(float(a), float(b))
    position = np.clip((z + _Z_LIMIT) * ((_Z_POINTS - 1) / (2 * _Z_LIMIT)), 0.0, _Z_POINTS - 1.0)
    low = np.minimum(position.astype(np.int64), _Z_POINTS - 2)
    return table[low] + (position - low) * (table[low + 1] - table[low])


def beta_ppf(u: np.ndarray, a: float, b: float) -> np.ndarray:
    """Inverse CDF of Beta(a, b) (a, b >= 1) at `u`, by a tabulated CDF."""
    x, cdf = _beta_table(float(a), float(b))
    return np.interp(u, cdf, x)


@lru_cache(maxsize=1024)
def _beta_of_normal(a: float, b: float) -> np.ndarray:
    z = np.linspace(-_Z_LIMIT, _Z_LIMIT, _Z_POINTS)
    return beta_ppf(normal_cdf(z), a, b)  # increasing levels: np.interp walks the table once


@lru_cache(maxsize=1024)
def _beta_table(a: float, b: float) -> tuple[np.ndarray, np.ndarray]:
    mean = a / (a + b)
    sd = math.sqrt(a * b / ((a + b) ** 2 * (a + b + 1.0)))
    x = np.linspace(max(0.0, mean - _BETA_SPAN_SD * sd), min(1.0, mean + _BETA_SPAN_SD * sd), GRID_POINTS)
    log_pdf = np.zeros_like(x)
    with np.errstate(divide="ignore", invalid="ignore"):
        if a != 1.0:
            log_pdf += (a - 1.0) * np.log(x)
        if b != 1.0:
            log_pdf += (b - 1.0) * np.log1p(-x)
    log_pdf = np.where(np.isfinite(log_pdf), log_pdf, -np.inf)
    return x, _cumulative(x, np.exp(log_pdf - log_pdf.max()))


def _cumulative(x: np.ndarray, density: np.ndarray) -> np.ndarray:
    """Normalised trapezoid CDF, nudged to strictly increasing so that np.interp can invert it."""
    steps = np.diff(x) * (density[1:] + density[:-1]) / 2
    cdf = np.concatenate(([0.0], np.cumsum(steps)))
    cdf /= cdf[-1]
    return cdf * (1.0 - 1e-12) + np.linspace(0.0, 1e-12, cdf.size)


def _read_at(sorted_values: np.ndarray, positions: np.ndarray) -> np.ndarray:
    low = np.floor(positions).astype(np.int64)
    high = np.minimum(low + 1, sorted_values.size - 1)
    return sorted_values[low] + (positions - low) * (sorted_values[high] - sorted_values[low])
