"""The gate sees the cache: a cached-token share more than --max-cached-share-difference from the other
side's (the baseline's, or production's in the trace a run replayed) makes the replay unfaithful; the
per-request cached tokens of a comparison; and the note that --speed/--scale shortens prefix reuse."""

from __future__ import annotations

import numpy as np
import pytest
from replay_helpers import results_table as table

from replayer.compare.fidelity import CACHE_BLOCK_TOKENS, _cached_share_check, cached_token_pairs
from replayer.judge.gate_limits import FidelityLimits
from replayer.judge.run_fidelity import (
    RunFacts,
    prefix_reuse_check,
    prefix_reuse_gaps_s,
    run_checks,
)
from replayer.judge.trace_cache import read_trace_cache, trace_cache
from replayer.report.terminal import cache_lines
from replayer.results.summary import summarize
from tests.replayer.compare.test_fidelity import side

NAN = np.nan


@pytest.mark.parametrize(
    ("candidate_cached", "status"),
    [([40, 40], "ok"), ([39, 40], "ok"), ([34, 40], "fail"), ([10, 10], "fail")],  # of 200: 40% baseline
)
def test_cached_share_more_than_two_points_apart_fails(candidate_cached, status):
    check = _cached_share_check(
        side([100, 100], [50, 30], [NAN, NAN]),
        side([100, 100], candidate_cached, [NAN, NAN]),
        FidelityLimits(),
    )
    assert check["status"] == status and check["limit"] == 0.02
    if status == "fail":
        assert check["summary"].endswith("points apart > 2 (--max-cached-share-difference)")


def test_the_limit_is_adjustable_and_a_side_without_cached_tokens_stays_info():
    baseline, candidate = side([100], [40], [NAN]), side([100], [10], [NAN])
    assert (
        _cached_share_check(baseline, candidate, FidelityLimits(max_cached_share_difference=0.5))["status"]
        == "ok"
    )
    assert _cached_share_check(baseline, side([100], [NAN], [NAN]), FidelityLimits())["status"] == "info"


def facts(cached, success=None, trace=None, speed=1.0, scale=1.0) -> RunFacts:
    n = len(cached)
    ones = np.ones(n, dtype=bool)
    return RunFacts(
        sent=ones,
        success=ones if success is None else np.array(success),
        dispatch_lag_ns=np.zeros(n),
        prompt_tokens=np.full(n, 100.0),
        recorded_prompt_tokens=np.full(n, 100.0),
        completion_tokens=np.full(n, 4.0),
        recorded_completion_tokens=np.full(n, 4.0),
        stop_reason="completed",
        source_request_id=np.array([f"r{i}" for i in range(n)], dtype=object),
        cached_tokens=np.array(cached, dtype=float),
        trace=trace,
        speed=speed,
        scale=scale,
    )


# production: r0..r2 replayed (50 + 30 + 10 cached of 300 = 30%); r3 not in the run, r4 failed
PRODUCTION = trace_cache(
    ["r0", "r1", "r2", "r3", "r4"],
    [True, True, True, True, False],
    [0, 1_000_000, 3_000_000, 4_000_000, 5_000_000],
    [100, 100, 100, 100, 100],
    [50, 30, 10, 100, 100],
    first_block_hash=[7, 8, 7, 7, None],
)


def cache_row(checks: list[dict]) -> dict:
    return next(c for c in checks if "cached-token share" in c["check"])


def test_a_run_is_judged_against_the_cache_hits_of_the_trace_it_replayed():
    ok = cache_row(run_checks("run", facts([50, 30, 11], trace=PRODUCTION), FidelityLimits()))
    assert ok["status"] == "ok" and ok["value"] == pytest.approx(1 / 300)
    assert ok["detail"] == "production 30.0%, run 30.3%"
    cold = cache_row(run_checks("run", facts([0, 0, 0], trace=PRODUCTION), FidelityLimits()))
    assert cold["status"] == "fail" and cold["check"] == "run: cached-token share vs production (difference)"
    assert (
        cold["summary"]
        == "cached-token share 0.0% vs production's 30.0%: 30.0 points apart > 2 (--max-cached-share-difference)"
    )
    # a run that reports no cached tokens: an info row; no trace named: no row at all
    assert (
        cache_row(run_checks("run", facts([NAN] * 3, trace=PRODUCTION), FidelityLimits()))["status"] == "info"
    )
    assert not [c for c in run_checks("run", facts([0, 0, 0]), FidelityLimits()) if "cache" in c["check"]]
    # compared with that trace itself, the cross check says it (one line per reason)
    no_repeat = run_checks("run", facts([0, 0, 0], trace=PRODUCTION), FidelityLimits(), cache_vs_trace=False)
    assert not [c for c in no_repeat if "cached-token" in c["check"]]


def test_the_replay_verdict_fails_on_a_cold_cache(tmp_path):
    trace = trace_cache(["r0", "r1"], [True, True], [0, 1], [100, 100], [50, 50])
    cold = summarize(table(2, prompt_tokens=100, cached_tokens=0), stop_reason="completed", trace=trace)
    assert cold["verdict"]["status"] == "fail" and cold["verdict"]["exit_code"] == 1
    assert "cached-token share 0.0% vs production's 50.0%" in cold["verdict"]["headline"]
    warm = summarize(table(2, prompt_tokens=100, cached_tokens=49), stop_reason="completed", trace=trace)
    assert warm["verdict"]["status"] == "pass"
    gone = read_trace_cache(tmp_path / "moved.parquet")
    unknown = summarize(table(2, prompt_tokens=100, cached_tokens=0), stop_reason="completed", trace=gone)
    row = cache_row(unknown["checks"])
    assert (
        row["status"] == "info"
        and "trace unreadable" in row["detail"]
        and unknown["verdict"]["status"] == "pass"
    )


def test_reuse_gap_is_to_the_latest_earlier_request_with_the_same_first_block():
    arrival_us = np.array([0, 1_000_000, 3_000_000, 4_000_000, 4_500_000])
    first = np.array([7, 8, 7, 7, 9])
    has = np.array([True, True, True, True, False])
    assert prefix_reuse_gaps_s(arrival_us, first, has).tolist() == [3.0, 1.0]
    shuffled = np.array([3, 0, 4, 2, 1])  # arrival order is found, not assumed
    assert prefix_reuse_gaps_s(arrival_us[shuffled], first[shuffled], has[shuffled]).tolist() == [3.0, 1.0]


def test_faster_replay_warns_that_the_cache_may_evict_what_production_reused():
    check = prefix_reuse_check("run", np.array([4.2]), 4.0, 1.0)
    assert check["status"] == "warn" and check["value"] == pytest.approx(1.05)
    assert check["detail"] == (
        "requests reuse a prefix sent 4.2 s earlier (p50) in production; at speed 4x that is 1.05 s; "
        "the engine's cache may evict what production reused"
    )
    scaled = prefix_reuse_check("run", np.array([1.0, 2.0, 9.0]), 1.0, 2.0)
    assert (
        scaled["status"] == "warn"
        and "at scale 2 that is 2 s with 2x the requests in between" in scaled["detail"]
    )
    assert prefix_reuse_check("run", np.array([4.2]), 1.0, 1.0) is None
    assert prefix_reuse_check("run", np.array([4.2]), 0.5, 1.0)["status"] == "info"
    assert prefix_reuse_check("run", np.array([]), 4.0, 1.0) is None
    # in the run's checks: over the requests it replayed (r0, r1, r2 -> one gap, r2 to r0: 3 s)
    row = next(
        c
        for c in run_checks("run", facts([50, 30, 10], trace=PRODUCTION, speed=3.0), FidelityLimits())
        if "reuse" in c["check"]
    )
    assert (
        row["status"] == "warn"
        and "sent 3 s earlier (p50) in production; at speed 3x that is 1 s" in row["detail"]
    )


def test_per_request_cached_tokens_of_the_pairs():
    pairs = cached_token_pairs(np.array([100, 100, 0, NAN]), np.array([100, 80, 64, 50]))
    assert CACHE_BLOCK_TOKENS == 16
    assert pairs == {
        "count": 3,
        "block_tokens": 16,
        "share_differ": pytest.approx(2 / 3),  # 20 and 64 apart; 0 is the same hit
        "share_fewer": pytest.approx(1 / 3),
        "abs_difference_p50": 20.0,
        "abs_difference_p90": pytest.approx(55.2),  # [0, 20, 64] at 90%
    }
    assert cached_token_pairs(np.array([NAN]), np.array([5.0]))["count"] == 0


def test_reports_show_the_shares_side_by_side_and_the_pairs():
    result = {
        "cache": {
            "baseline": {"cached_share": 0.4, "write_share": None},
            "candidate": {"cached_share": 0.12, "write_share": None},
            "difference": -0.28,
            "limit": 0.02,
        },
        "paired": {"cached_tokens": cached_token_pairs(np.array([100.0, 100.0]), np.array([100.0, 20.0]))},
    }
    assert cache_lines(result) == [
        "cached-token share baseline 40.0% -> candidate 12.0% (-28.0 points; limit ±2)",
        "cached tokens per request (2 pairs): 50.0% differ by more than one block (16 tokens), 50.0% fewer "
        "on the candidate; |difference| p50 40, p90 72 tokens",
    ]
    assert cache_lines({"cache": None}) == []
