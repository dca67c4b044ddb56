"""The paired bootstrap: literal pair resampling on numbers small enough to check by eye, the fast
copula path held to brute force, exact [1, 1] for identical sides, and determinism."""

from __future__ import annotations

import numpy as np
import pytest

from replayer.compare.paired import (
    EXACT_MAX_REQUESTS,
    beta_from_normal,
    beta_ppf,
    correlated_normals,
    normal_cdf,
    paired_ratio_draws,
    resample_counts,
    score_correlation,
    weighted_quantiles,
)
from replayer.judge.stats import make_rng


def test_weighted_quantile_is_numpys_percentile_of_the_resampled_multiset():
    values = np.array([5.0, 1.0, 3.0, 3.0, 9.0])
    request = np.array([0, 1, 2, 2, 3])  # request 2 has two values (pooled gaps)
    counts = np.array([[1, 1, 1, 1], [2, 0, 1, 0], [0, 0, 0, 3], [0, 0, 0, 0]], dtype=np.int32)
    got = weighted_quantiles(values, request, counts, (0.5, 0.9))
    # resample 0: {1,3,3,5,9}; 1: {5,5,3,3}; 2: {9,9,9}; 3: nothing drawn
    assert got[0.5][:3].tolist() == [3.0, 4.0, 9.0] and got[0.9][:3].tolist() == [7.4, 5.0, 9.0]
    assert np.isnan(got[0.5][3])
    for row in range(3):
        multiset = np.repeat(values, counts[row][request])
        assert got[0.9][row] == pytest.approx(np.percentile(multiset, 90))


def test_resample_counts_draw_as_many_requests_as_there_are():
    counts = resample_counts(7, 500, make_rng(1))
    assert counts.shape == (500, 7) and (counts.sum(axis=1) == 7).all()
    assert counts.mean() == pytest.approx(1.0, abs=0.05)


@pytest.mark.parametrize("n", [20, 5000])  # the literal path and the copula path
def test_identical_sides_give_exactly_one_and_a_constant_factor_exactly_that(n):
    values = np.random.default_rng(3).lognormal(0, 0.7, n)
    request = np.arange(n)
    same = paired_ratio_draws((values, request), (values.copy(), request), n, (0.5, 0.99), make_rng(), 2000)
    scaled = paired_ratio_draws((values, request), (values * 1.5, request), n, (0.5, 0.99), make_rng(), 2000)
    for q in (0.5, 0.99):
        assert (same[q] == 1.0).all()
        assert np.allclose(scaled[q], 1.5, rtol=1e-12)


def test_pooled_values_of_identical_sides_give_exactly_one():
    rng = np.random.default_rng(5)
    request = np.repeat(np.arange(3000), 20)  # 20 gaps a request, pooled
    gaps = rng.lognormal(0, 0.3, request.size)
    draws = paired_ratio_draws(
        (gaps, request), (gaps.copy(), request), 3000, (0.9,), make_rng(), 1000, 3000, 3000
    )
    assert (draws[0.9] == 1.0).all()


@pytest.mark.parametrize("correlation", [0.0, 0.6, 0.95])
@pytest.mark.parametrize("q", [0.5, 0.9, 0.99])
def test_copula_path_matches_brute_force_pair_resampling(correlation, q):
    rng = np.random.default_rng(7)
    n = 2000
    assert n > EXACT_MAX_REQUESTS  # this is the fast path
    x = rng.standard_normal(n)
    y = correlation * x + np.sqrt(1 - correlation**2) * rng.standard_normal(n)
    b, c = np.exp(0.5 * x), 1.1 * np.exp(0.5 * y)
    picks = rng.integers(0, n, (2000, n))
    brute = np.percentile(c[picks], q * 100, axis=1) / np.percentile(b[picks], q * 100, axis=1)
    fast = paired_ratio_draws((b, np.arange(n)), (c, np.arange(n)), n, (q,), make_rng(), 4000)[q]
    brute_ci, fast_ci = np.percentile(brute, [2.5, 50, 97.5]), np.percentile(fast, [2.5, 50, 97.5])
    assert np.all(np.abs(fast_ci - brute_ci) <= 0.15 * (brute_ci[2] - brute_ci[0]))


def test_same_seed_same_draws():
    values = np.random.default_rng(1).lognormal(0, 0.5, 1000)
    other = values * np.random.default_rng(2).lognormal(0, 0.1, 1000)
    request = np.arange(1000)
    first = paired_ratio_draws((values, request), (other, request), 1000, (0.9,), make_rng(42), 500)
    again = paired_ratio_draws((values, request), (other, request), 1000, (0.9,), make_rng(42), 500)
    assert np.array_equal(first[0.9], again[0.9])


def test_score_correlation_by_hand():
    # q = 0.5, each side's median 2.5: scores -0.5 (above) or +0.5 (at or below), per request
    b = np.array([1.0, 2.0, 3.0, 4.0])
    same_order = score_correlation(b, np.arange(4), 2.5, b * 2, np.arange(4), 5.0, 0.5, 4)
    reversed_order = score_correlation(b, np.arange(4), 2.5, b[::-1].copy(), np.arange(4), 2.5, 0.5, 4)
    assert same_order == 1.0 and reversed_order == -1.0
    # requests 1 and 2 missing on the candidate side score 0 there: 0.5 / sqrt(1 * 0.5)
    half = score_correlation(b, np.arange(4), 2.5, np.array([1.0, 4.0]), np.array([0, 3]), 2.5, 0.5, 4)
    assert half == pytest.approx(1 / np.sqrt(2))


def test_beta_ppf_of_known_laws():
    u = np.linspace(0.01, 0.99, 9)
    assert np.allclose(beta_ppf(u, 1, 1), u, atol=1e-6)  # uniform
    assert np.allclose(beta_ppf(u, 2, 1), np.sqrt(u), atol=1e-4)  # CDF x^2
    assert np.allclose(beta_ppf(u, 1, 3), 1 - (1 - u) ** (1 / 3), atol=1e-4)  # CDF 1 - (1-x)^3


def test_beta_from_normal_is_the_beta_quantile_at_the_normal_level():
    z = np.linspace(-4, 4, 17)
    for a, b in ((1, 1), (3, 40), (950, 51)):
        assert np.allclose(beta_from_normal(z, a, b), beta_ppf(normal_cdf(z), a, b), atol=1e-5)
    assert np.allclose(normal_cdf(np.array([-1.959964, 0.0, 1.644854])), [0.025, 0.5, 0.95], atol=1e-6)


def test_correlated_normals():
    z_b, z_c = correlated_normals(0.8, 20_000, make_rng())
    assert abs(z_b.mean()) < 0.03 and abs(z_c.std() - 1) < 0.02
    assert 0.78 < np.corrcoef(z_b, z_c)[0, 1] < 0.82
    same_b, same_c = correlated_normals(1.0, 10, make_rng())
    assert same_b is same_c
