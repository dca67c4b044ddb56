"""Like with like across APIs: different endpoints are refused in one line unless --allow-different-api,
and the report breaks latency down per endpoint."""

from __future__ import annotations

import numpy as np
import pytest

from llmreplay.errors import BadInput
from replayer.compare.apis import api_section
from replayer.compare.buckets import bucket_order
from replayer.compare.config import CompareConfig


def ends(*names: str) -> np.ndarray:
    return np.array(names, dtype=object)


def test_the_same_apis_compare_and_are_counted():
    section = api_section(
        ends("responses", "messages", "messages"), ends("messages", "responses"), False, "run"
    )
    assert section == {
        "baseline": {"messages": 2, "responses": 1},
        "candidate": {"messages": 1, "responses": 1},
        "same": True,
        "allowed": False,
    }


def test_a_chat_recording_against_a_messages_replay_is_refused_in_one_line():
    with pytest.raises(BadInput) as refused:
        api_section(ends("chat_completions"), ends("messages"), False, "candidate")
    line = str(refused.value)
    assert "\n" not in line and "--allow-different-api" in line
    assert "chat_completions" in line and "messages" in line


def test_allowed_when_asked():
    section = api_section(ends("chat_completions"), ends("messages"), True, "candidate")
    assert section["same"] is False and section["allowed"] is True


def test_the_flag_is_declared_once_on_the_config():
    assert CompareConfig().allow_different_api is False


def test_endpoint_buckets_are_named_by_the_endpoint():
    assert bucket_order("endpoint", [ends("responses", "chat_completions"), ends("messages")]) == [
        "chat_completions", "messages", "responses",
    ]  # fmt: skip


def test_a_candidate_percentile_of_zero_is_an_improvement_without_a_traceback():
    """vLLM-CPU under load may flush a whole stream in one read: ITL and TPOT are then 0 ns."""
    from llmreplay.metrics import GATING
    from replayer.judge.stats import IMPROVEMENT, NO_CHANGE
    from replayer.judge.verdict import verdict

    zero = {"verdict": IMPROVEMENT, "ratio": 0.0, "ci_low": 0.0, "ci_high": 0.0}
    same = {"verdict": NO_CHANGE, "ratio": 1.0, "ci_low": 0.9, "ci_high": 1.1}
    latency = {
        m.name: {"comparison": {f"p{q}": zero if m.name == "itl" else same for q in m.percentiles}}
        for m in GATING
    }
    sides = {label: {"reasoning_share": None, "successful": 10} for label in ("baseline", "candidate")}
    found = verdict("compare", [], [], [], sides, latency=latency)
    assert "faster" in found["headline"] and "inf" in found["headline"]
