"""The one noise rule of a capacity step's rates (docs/capacity-format.md, "noise").

A rate's standard error is the batch-means estimate over NOISE_BINS equal bins of its window: the
count-based Poisson value sqrt(n)/T when completions are random, smaller when they are regular, never
below one request per window. Two rates differ beyond the noise when the gap exceeds NOISE_Z of its SE.
"""

from __future__ import annotations

import math

import numpy as np

NOISE_Z = 2.0  # standard errors a difference must exceed (about 95%)
NOISE_BINS = 10  # batch means over this many equal bins of the window
MIN_BINS = 4  # fewer non-trivial bins: the count-based value sqrt(n)/T
FLOOR_SHARE = 0.02  # edge effects of a window (clock, in-flight at its ends): 2% of the offered rate


def rate_se_per_s(times_ns: np.ndarray, start_ns: float, length_ns: float) -> float:
    """SE (per s) of the rate of the events at `times_ns` within [start, start + length)."""
    seconds = length_ns / 1e9
    times = np.asarray(times_ns, dtype=float)
    inside = times[(times >= start_ns) & (times < start_ns + length_ns)]
    count_based = math.sqrt(max(inside.size, 1)) / seconds
    if inside.size < MIN_BINS:
        return count_based
    counts = np.histogram(inside, bins=NOISE_BINS, range=(start_ns, start_ns + length_ns))[0]
    bin_s = seconds / NOISE_BINS
    batch_means = float(np.std(counts, ddof=1)) / math.sqrt(NOISE_BINS) / bin_s
    return max(batch_means, 1 / seconds)


def band_per_s(*se_per_s: float) -> float:
    """How far apart rates with these SEs can lie by chance: NOISE_Z x the SE of their difference."""
    return NOISE_Z * math.sqrt(sum(se * se for se in se_per_s))


def fell_behind(offered_per_s: float, achieved_per_s: float, achieved_se_per_s: float) -> bool:
    """Achieved below offered beyond the noise (and beyond a window's edge effects)."""
    band = max(band_per_s(achieved_se_per_s), FLOOR_SHARE * offered_per_s)
    return achieved_per_s < offered_per_s - band
