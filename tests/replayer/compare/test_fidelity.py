"""Compare's cache section: the cached-token share of each side, and beside it the share written to
the cache where a side reports writes (Anthropic's cache_creation_input_tokens)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from replayer.compare.fidelity import _cached_share_check
from replayer.judge.gate_limits import FidelityLimits

NAN = np.nan


def side(prompt, cached, written, success=None):
    """The RequestColumns arrays the check reads, from tiny numbers."""
    prompt = np.array(prompt, dtype=float)
    ok = np.ones(prompt.size, dtype=bool) if success is None else np.array(success)
    arrays = {"cached_tokens": cached, "cache_write_tokens": written}
    return SimpleNamespace(
        success=ok, prompt_tokens=prompt, **{k: np.array(v, float) for k, v in arrays.items()}
    )


def test_cache_writes_are_shown_beside_the_cached_share():
    baseline = side([100, 100], [50, 30], [10, 10])
    candidate = side([100, 100, 100], [40, 40, 999], [20, NAN, 999], success=[True, True, False])
    check = _cached_share_check(baseline, candidate, FidelityLimits())
    assert check["value"] == 0.0 and check["status"] == "ok"  # 40% read on both sides
    # of the successful requests that report writes: 20 of 100 prompt tokens; the failed one not counted
    assert "cache writes baseline 10.0%, candidate 20.0%" in check["detail"]


def test_no_side_reporting_writes_says_nothing_of_them():
    plain = side([100], [50], [NAN])
    assert "cache writes" not in _cached_share_check(plain, plain, FidelityLimits())["detail"]


def test_writes_without_reads_are_still_shown():
    written = side([100], [NAN], [25])
    check = _cached_share_check(written, side([100], [NAN], [NAN]), FidelityLimits())
    assert (
        check["status"] == "info"
        and check["detail"] == "baseline n/a, candidate n/a; cache writes baseline 25.0%, candidate n/a"
    )
