"""Bootstrap CIs and the verdict rule, with numbers small enough to check by eye."""

from __future__ import annotations

import numpy as np
import pytest

from replayer.judge.stats import (
    IMPROVEMENT,
    INCONCLUSIVE,
    NO_CHANGE,
    NO_DATA,
    REGRESSION,
    RateDifference,
    RatioEstimate,
    bootstrap_quantile,
    latency_verdict,
    make_rng,
    proportion_difference,
    quantile_ratio,
    rate_verdict,
)


@pytest.mark.parametrize("n", [15, 300, 4000])
@pytest.mark.parametrize("q", [0.5, 0.9, 0.99])
def test_order_statistic_bootstrap_matches_brute_force_resampling(n, q):
    rng = np.random.default_rng(3)
    values = np.sort(rng.lognormal(0, 0.6, n))
    brute = np.array([np.percentile(values[rng.integers(0, n, n)], q * 100) for _ in range(3000)])
    fast = bootstrap_quantile(values, q, 3000, rng)
    brute_ci = np.percentile(brute, [2.5, 50, 97.5])
    fast_ci = np.percentile(fast, [2.5, 50, 97.5])
    spread = brute_ci[2] - brute_ci[0]
    assert np.all(np.abs(fast_ci - brute_ci) <= 0.2 * spread + 1e-12)


def test_effective_n_widens_the_interval():
    values = np.sort(np.random.default_rng(1).lognormal(0, 0.5, 10_000))
    narrow = bootstrap_quantile(values, 0.9, 2000, make_rng())
    wide = bootstrap_quantile(values, 0.9, 2000, make_rng(), effective_n=100)
    assert np.ptp(np.percentile(wide, [2.5, 97.5])) > 3 * np.ptp(np.percentile(narrow, [2.5, 97.5]))


def test_quantile_ratio_point_estimate_is_numpys_percentile():
    b = np.array([10.0, 20.0, 30.0, 40.0])
    c = b * 2
    estimate = quantile_ratio(b, c, 0.5, make_rng())
    assert estimate.baseline == 25.0 and estimate.candidate == 50.0 and estimate.ratio == 2.0


def test_quantile_ratio_without_values_has_no_ratio():
    estimate = quantile_ratio(np.array([]), np.array([1.0]), 0.5, make_rng())
    assert estimate.ratio is None
    assert latency_verdict(estimate, 0.1) == NO_DATA


@pytest.mark.parametrize(
    ("ratio", "low", "high", "expected"),
    [
        (1.5, 1.3, 1.7, REGRESSION),  # significant and over tolerance
        (1.05, 1.02, 1.08, NO_CHANGE),  # significant but within tolerance: CI inside the band
        (1.15, 0.95, 1.35, INCONCLUSIVE),  # over tolerance but not significant
        (1.08, 1.01, 1.15, INCONCLUSIVE),  # significant, CI crosses the tolerance bound
        (0.7, 0.6, 0.8, IMPROVEMENT),
        (1.0, 0.97, 1.03, NO_CHANGE),
    ],
)
def test_latency_verdict_rule(ratio, low, high, expected):
    assert latency_verdict(RatioEstimate(1.0, ratio, ratio, low, high), tolerance=0.10) == expected


def test_error_rate_difference_and_verdict():
    rng = make_rng()
    same = proportion_difference(0, 1000, 0, 1000, rng)
    assert (same.difference, same.ci_low, same.ci_high) == (0.0, 0.0, 0.0)
    assert rate_verdict(same, 0.01) == NO_CHANGE
    worse = proportion_difference(5, 1000, 150, 1000, rng)
    assert worse.difference == pytest.approx(0.145)
    assert rate_verdict(worse, 0.01) == REGRESSION
    assert rate_verdict(RateDifference(None, None, None, None, None), 0.01) == NO_DATA
