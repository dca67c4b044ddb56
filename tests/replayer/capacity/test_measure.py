"""A step's CIs count requests that share the server's fate (a queue's slow stretch) as the effective
sample their autocorrelation leaves: an SLO's upper bound then covers the true percentile about as often
as its confidence says, where drawing correlated requests one by one passes a step the server did not hold."""

from __future__ import annotations

import math

import numpy as np
import pytest
from compare_fixtures import Shape, write_run

from replayer.capacity.measure import Clock, measure
from replayer.judge import time_blocks
from replayer.judge.gate_limits import FidelityLimits
from replayer.judge.slo import parse_slo
from replayer.measured.side import load_side

N, RHO, SIGMA, MEDIAN_MS = 400, 0.7, 0.3, 80.0
TRUE_P95_MS = MEDIAN_MS * math.exp(1.6449 * SIGMA / math.sqrt(1 - RHO**2))  # the stationary marginal's
SLO = parse_slo(f"ttft_p95<={TRUE_P95_MS:.3f}ms")


def _queue_run(root, seed: int):
    """A step whose TTFTs drift together in send order (AR(1) in log): a queue filling and draining."""
    rng = np.random.default_rng(seed)
    log = np.empty(N)
    log[0] = rng.normal(0, SIGMA / math.sqrt(1 - RHO**2))
    for i in range(1, N):
        log[i] = RHO * log[i - 1] + rng.normal(0, SIGMA)
    ttft = (MEDIAN_MS * 1e6 * np.exp(log)).astype(np.int64)
    return load_side(write_run(root / f"run-{seed}", Shape(n=N, seed=seed, interval_ms=50.0), ttft, _tpot(rng)), "step")


def _tpot(rng: np.random.Generator) -> np.ndarray:
    """Decode time independent of the queue: each request its own, around 10 ms."""
    return (10e6 * np.exp(rng.normal(0, 0.2, N))).astype(np.int64)


def _row(side) -> dict:
    return measure(side, Clock(0.0, N * 50e6), (SLO,), FidelityLimits(), 1.0)


def _covered(rows: list[dict]) -> float:
    """The share of steps whose SLO upper bound reaches the true p95 (a breach: the SLO is the true p95)."""
    return float(np.mean([row["slos"][0]["ci_high_ms"] >= TRUE_P95_MS for row in rows]))


@pytest.fixture(scope="module")
def sides(tmp_path_factory):
    root = tmp_path_factory.mktemp("queue-runs")
    return [_queue_run(root, seed) for seed in range(40)]


def test_a_queue_s_correlated_stretch_counts_as_fewer_requests(sides):
    row = _row(sides[0])
    ttft, tpot = row["dependence"]["ttft"], row["dependence"]["tpot"]
    assert ttft["autocorrelation_time"] > 3 and ttft["effective_requests"] < N / 3, ttft  # AR(1): 5.7
    assert tpot["effective_requests"] >= N / 2, tpot  # decode time is each request's own


def test_slo_upper_bounds_cover_the_true_percentile_only_with_the_effective_sample(sides, monkeypatch):
    """Every step sits exactly at its SLO (threshold = the true p95), so a pass is a wrong pass: the upper
    bound of a 95% CI should reach it in about 97.5% of steps; drawing requests one by one, it reaches it less."""
    blocked = _covered([_row(side) for side in sides])
    monkeypatch.setattr(time_blocks, "dependence", lambda series: time_blocks.INDEPENDENT)
    alone = _covered([_row(side) for side in sides])
    print(f"covered: {blocked:.0%} with the effective sample, {alone:.0%} drawing requests alone")
    assert blocked >= 0.9 and alone <= blocked - 0.1, (blocked, alone)  # measured: 95% and 82%


def test_independent_requests_keep_their_count(tmp_path):
    rng = np.random.default_rng(5)
    ttft = (MEDIAN_MS * 1e6 * np.exp(rng.normal(0, SIGMA, N))).astype(np.int64)
    side = load_side(write_run(tmp_path / "run", Shape(n=N, seed=5, interval_ms=50.0), ttft, _tpot(rng)), "step")
    found = [d for d in _row(side)["dependence"].values() if d["requests"]]  # TTFO: none, no reasoning
    assert found and all(d["effective_requests"] >= N / 2 for d in found), found
