"""Neighbouring requests that move together are resampled in blocks (replayer.judge.time_blocks), and an
A/A whose two sides each had slow and fast stretches reads GO as often as the gate's confidence says."""

from __future__ import annotations

import numpy as np
import pytest
from compare_fixtures import Shape, latencies_ns, write_run

import replayer.judge.time_blocks as time_blocks
from replayer.compare.config import CompareConfig
from replayer.compare.sides import compare_sides
from replayer.measured.side import load_side


def _ar1(rng: np.random.Generator, n: int, rho: float, sigma: float) -> np.ndarray:
    """A stationary AR(1) series: each value rho times the last plus fresh noise."""
    out = np.empty(n)
    out[0] = rng.normal(0, sigma / np.sqrt(1 - rho**2))
    for i in range(1, n):
        out[i] = rho * out[i - 1] + rng.normal(0, sigma)
    return out


def test_independent_values_have_time_one_and_an_ar1_its_known_time():
    rng = np.random.default_rng(1)
    tau, lag1 = time_blocks.autocorrelation_time(rng.normal(size=4000))
    assert tau < 1.2 and abs(lag1) < 0.05
    tau, lag1 = time_blocks.autocorrelation_time(_ar1(rng, 4000, 0.6, 1.0))
    assert abs(tau - (1 + 0.6) / (1 - 0.6)) < 1.0 and abs(lag1 - 0.6) < 0.05  # AR(1): (1+rho)/(1-rho) = 4
    assert time_blocks.autocorrelation_time(np.ones(100)) == (1.0, None)
    assert time_blocks.autocorrelation_time(np.arange(5.0)) == (1.0, None)  # too short to tell


def test_the_strongest_series_sets_blocks_capped_to_leave_eight():
    rng = np.random.default_rng(2)
    found = time_blocks.dependence({"ttft": rng.normal(size=400), "e2e": _ar1(rng, 400, 0.8, 1.0)})
    assert found.metric == "e2e" and 5 <= found.block_requests <= 15
    assert found.effective_requests == pytest.approx(400 / found.autocorrelation_time)
    capped = time_blocks.dependence({"e2e": _ar1(rng, 40, 0.95, 1.0)})
    assert capped.block_requests == 40 // time_blocks.MIN_BLOCKS
    assert time_blocks.dependence({}).block_requests == 1


def test_blocks_follow_arrival_order_not_request_numbers():
    block, blocks = time_blocks.block_numbers(np.array([5.0, 1.0, 3.0, 0.0, 4.0, 2.0, 6.0]), 3)
    assert blocks == 3 and block.tolist() == [1, 0, 1, 0, 1, 0, 2]
    same, count = time_blocks.block_numbers(np.array([2.0, 1.0]), 1)
    assert count == 2 and same.tolist() == [0, 1]


def _aa_runs(root, seed: int, n: int = 160, rho: float = 0.8, sigma: float = 0.06):
    """One trace run twice on a machine with slow and fast stretches: the same requests, each side's
    latencies times its own AR(1) drift in arrival order (what a shared engine's queue does)."""
    shape = Shape(n=n, seed=seed, interval_ms=50.0)
    ttft, tpot = latencies_ns(shape, seed=seed + 1, sigma=0.4)
    rng = np.random.default_rng(seed + 2)
    runs = []
    for label in ("a", "b"):
        drift = np.exp(_ar1(rng, n, rho, sigma))
        runs.append(write_run(root / f"{seed}-{label}", shape, (ttft * drift).astype(np.int64),
                              (tpot * drift).astype(np.int64)))  # fmt: skip
    return runs


def test_an_aa_with_slow_and_fast_stretches_reads_no_go_less_than_with_requests_drawn_alone(tmp_path, monkeypatch):
    """Strong drift (rho 0.9) on 96 requests: about 5 independent stretches a side. Blocks cannot make
    that a big sample, but they stop calling its drift a regression most of the time."""
    pairs = [_aa_runs(tmp_path, seed, n=96, rho=0.9, sigma=0.1) for seed in range(8)]
    config = CompareConfig(draws=2000)

    def no_gos() -> list[str]:
        out = []
        for a, b in pairs:
            result = compare_sides(load_side(a, "baseline"), load_side(b, "candidate"), config)
            if result["verdict"]["exit_code"] != 0:
                out.append(result["verdict"]["headline"])
        return out

    blocked = no_gos()
    monkeypatch.setattr(time_blocks, "MIN_BLOCKS", 10**9)  # blocks of one request: the old bootstrap
    alone = no_gos()
    assert len(blocked) <= 2 and len(alone) >= len(blocked) + 3, (blocked, alone)
