"""Requests close in time share the engine's fate (one batch, one queue), so they are not independent
draws: the bootstrap resamples blocks of consecutive requests, as long as the requests' paired latency
differences stay correlated (the moving-block idea; the length from the integrated autocorrelation
time, Geyer's initial positive sequence). Pure numpy."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

MIN_SERIES = 16  # fewer paired requests than this: too few to estimate a correlation, blocks of 1
MIN_BLOCKS = 8  # the block length never leaves fewer blocks than this
WHITE_NOISE_BAND = 2.0  # a lag-1 autocorrelation within 2/sqrt(n) is independent requests' noise
BLOCK_PER_TIME = 2.0  # block length / autocorrelation time: blocks of one time lose what crosses them


@dataclass(frozen=True, slots=True)
class Dependence:
    """How strongly neighbouring requests move together, and the block length that follows."""

    requests: int  # paired requests in arrival order
    autocorrelation_time: float  # 1 + 2 * sum of autocorrelations: 1 for independent requests
    lag1: float | None  # the lag-1 autocorrelation of the series that set the time
    metric: str | None  # that series' metric
    block_requests: int  # consecutive requests resampled together

    @property
    def effective_requests(self) -> float:
        return self.requests / self.autocorrelation_time

    def as_dict(self) -> dict:
        return {
            "requests": self.requests,
            "metric": self.metric,
            "lag1_autocorrelation": None if self.lag1 is None else round(self.lag1, 4),
            "autocorrelation_time": round(self.autocorrelation_time, 3),
            "effective_requests": round(self.effective_requests, 1),
            "block_requests": self.block_requests,
        }


INDEPENDENT = Dependence(0, 1.0, None, None, 1)


def autocovariances(x: np.ndarray) -> np.ndarray:
    """Biased autocovariances of `x` at lags 0..n-1, by FFT: O(n log n) for a day of requests."""
    n = x.size
    centred = x - x.mean()
    size = 1 << (2 * n - 1).bit_length()
    spectrum = np.fft.rfft(centred, size)
    return np.fft.irfft(spectrum * np.conj(spectrum), size)[:n] / n


def autocorrelation_time(x: np.ndarray) -> tuple[float, float | None]:
    """(1 + 2 sum of the autocorrelations, the lag-1 autocorrelation) of a series in time order, summed
    over Geyer's initial positive sequence (pairs of lags while their sum stays positive); (1, None)
    for a series too short or constant to tell."""
    x = x[np.isfinite(x)]
    if x.size < MIN_SERIES:
        return 1.0, None
    gamma = autocovariances(x)
    if gamma[0] <= 0:
        return 1.0, None
    pairs = gamma[: (gamma.size // 2) * 2].reshape(-1, 2).sum(axis=1)
    positive = np.flatnonzero(pairs <= 0)
    kept = pairs[: positive[0] if positive.size else pairs.size]
    tau = -1.0 + 2.0 * float(kept.sum()) / float(gamma[0])
    return max(1.0, tau), float(gamma[1] / gamma[0])


def dependence(series: dict[str, np.ndarray]) -> Dependence:
    """The strongest dependence among `series` (metric -> paired log-ratios in arrival order) and its
    block length: BLOCK_PER_TIME autocorrelation times, rounded up, capped to leave MIN_BLOCKS blocks;
    blocks of one while the lag-1 autocorrelation stays inside white noise's band."""
    found = INDEPENDENT
    for metric, values in series.items():
        finite = values[np.isfinite(values)]
        tau, lag1 = autocorrelation_time(finite)
        if lag1 is None or lag1 <= WHITE_NOISE_BAND / math.sqrt(finite.size):
            tau = 1.0  # within white noise's band: independent requests
        if found.metric is None or tau > found.autocorrelation_time:
            found = Dependence(finite.size, tau, lag1, metric, 1)
    tau = found.autocorrelation_time
    if tau <= 1.0:
        return found
    length = min(max(1, found.requests // MIN_BLOCKS), math.ceil(BLOCK_PER_TIME * tau))
    return Dependence(found.requests, tau, found.lag1, found.metric, length)


def block_numbers(cluster_arrival: np.ndarray, block_requests: int) -> tuple[np.ndarray, int]:
    """Each cluster's block (consecutive runs of `block_requests` clusters in arrival order) and how
    many blocks there are; identity for blocks of one."""
    clusters = cluster_arrival.size
    if block_requests <= 1 or clusters == 0:
        return np.arange(clusters, dtype=np.int64), clusters
    rank = np.empty(clusters, dtype=np.int64)
    rank[np.argsort(cluster_arrival, kind="stable")] = np.arange(clusters)
    return rank // block_requests, -(-clusters // block_requests)
