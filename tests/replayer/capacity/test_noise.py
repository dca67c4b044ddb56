"""The one noise rule: batch-means SE of a rate (count-based when completions are random, smaller when
regular, at least one request per window), and 'fell behind' beyond 2 SEs or the 2% edge floor."""

import math

import numpy as np
import pytest

from replayer.capacity.noise import FLOOR_SHARE, band_per_s, fell_behind, rate_se_per_s

S = 1_000_000_000


def test_regular_completions_have_the_floor_of_one_request_per_window():
    times = np.arange(60) * (S / 12)  # 12/s for 5 s, evenly
    assert rate_se_per_s(times, 0, 5 * S) == pytest.approx(1 / 5)


def test_random_completions_come_near_the_count_based_value():
    rng = np.random.default_rng(7)
    values = [rate_se_per_s(np.sort(rng.uniform(0, 5 * S, 600)), 0, 5 * S) for _ in range(200)]
    assert float(np.median(values)) == pytest.approx(math.sqrt(600) / 5, rel=0.15)


def test_few_events_are_count_based_and_events_outside_do_not_count():
    assert rate_se_per_s(np.array([1.0, 2.0, 9 * S]), 0, S) == pytest.approx(math.sqrt(2))


def test_fell_behind_beyond_two_standard_errors_or_the_floor():
    assert band_per_s(0.3, 0.4) == pytest.approx(1.0)
    assert not fell_behind(10.0, 9.5, 0.3)  # 0.5 short, band 0.6
    assert fell_behind(10.0, 9.3, 0.3)
    assert not fell_behind(100.0, 98.5, 0.1)  # within the 2% floor
    assert fell_behind(100.0, 100.0 * (1 - FLOOR_SHARE) - 0.01, 0.1)
