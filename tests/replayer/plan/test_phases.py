"""Warm-up and soak loops on the open-loop clock: tiny traces whose offsets can be checked by eye."""

from __future__ import annotations

import numpy as np
import pytest

from llmreplay.errors import BadInput
from llmreplay.trace_format import TraceRecord
from llmreplay.trace_io import records_to_table
from replayer.config import ScheduleConfig
from replayer.plan.arrays import PlanArrays
from replayer.plan.phases import (
    completed_loops,
    loop_name,
    loop_span_ns,
    prompt_copy,
    split_copy,
    trace_window,
)
from replayer.plan.request_builder import BuildOptions, build_request
from replayer.plan.schedule import build_schedule, schedule_input
from replayer.plan.sessions import link_sessions, session_codes

T0 = 1_700_000_000_000_000
S = 1_000_000_000


def rec(i: int, at_s: float, session: str | None = None, turn: int = 0) -> TraceRecord:
    return TraceRecord(
        request_id=f"r{i}",
        arrival_time=T0 + round(at_s * 1_000_000),
        endpoint="chat_completions",
        prompt_tokens=10,
        completion_tokens=3,
        token_source="server_usage",
        session_id=session,
        turn_index=turn,
        content_messages='[{"role": "user", "content": "hello"}]',
    )


TRACE = [rec(i, at) for i, at in enumerate((0, 10, 20, 30, 40, 50))]


def plan(records=TRACE, **config):
    rows = schedule_input(records_to_table(records, True))
    return rows, build_schedule(rows, ScheduleConfig(**config))


def test_without_from_the_first_warmup_of_the_trace_is_the_warmup():
    _, s = plan(warmup_ns=25 * S, speed=2.0)
    assert s.record_index.tolist() == [0, 1, 2, 3, 4, 5]
    assert s.scheduled_offset_ns.tolist() == [0, 5 * S, 10 * S, 15 * S, 20 * S, 25 * S]
    p = s.phases
    assert p.first_measured_record == 3 and p.warmup_s == 25.0 and p.measured_start_offset_s == 12.5


def test_with_from_the_warmup_is_the_stretch_just_before_it_and_offset_0_is_its_start():
    _, s = plan(from_offset_ns=30 * S, to_offset_ns=50 * S, warmup_ns=15 * S)
    assert s.record_index.tolist() == [2, 3, 4]  # 15 s..50 s: r2 warms up, r3 and r4 are measured
    assert s.scheduled_offset_ns.tolist() == [5 * S, 15 * S, 25 * S]  # offset 0 = 15 s into the trace
    assert s.phases.first_measured_record == 3 and s.phases.measured_start_offset_s == 15.0


def test_a_warmup_longer_than_the_trace_before_the_window_is_shortened_and_says_so():
    _, s = plan(from_offset_ns=10 * S, warmup_ns=60 * S)
    assert s.phases.warmup_s == 10.0 and s.phases.asked_warmup_s == 60.0
    assert trace_window(10 * S, None, 60 * S).shortened and not trace_window(None, None, 60 * S).shortened


def test_limit_counts_measured_rows_only():
    _, s = plan(warmup_ns=15 * S, limit=2)
    assert s.record_index.tolist() == [0, 1, 2, 3]


def test_no_warmup_and_no_soak_leave_the_schedule_as_it_was():
    _, s = plan(from_offset_ns=20 * S)
    assert s.scheduled_offset_ns.tolist() == [0, 10 * S, 20 * S, 30 * S]
    assert s.phases.loop_stride == 0 and s.phases.loops_planned == 1 and split_copy(3, 0) == (0, 3)


def test_soak_loops_follow_back_to_back_with_their_own_copy_numbers_and_stop_at_the_soak_end():
    _, s = plan(from_offset_ns=30 * S, warmup_ns=10 * S, soak_ns=65 * S)
    # warm-up r2 at 0; measured r3..r5 at 10, 20, 30; loop span 20 + median gap 10 = 30 s
    assert s.phases.loop_span_s == 30.0 and s.phases.loops_planned == 3 and s.phases.loop_stride == 1
    got = list(
        zip(
            s.record_index.tolist(), s.copy_index.tolist(), (s.scheduled_offset_ns // S).tolist(), strict=True
        )
    )
    assert got == [
        (2, 0, 0),
        (3, 0, 10),
        (4, 0, 20),
        (5, 0, 30),
        (3, 1, 40),
        (4, 1, 50),
        (5, 1, 60),
        (3, 2, 70),
    ]
    # soak ends 65 s after the measured start (10 s): loop 2 is cut after its first request
    assert s.scheduled_offset_ns.max() < 75 * S


def test_soak_with_scale_copies_numbers_loop_k_copy_c_as_k_times_stride_plus_c():
    _, s = plan(scale=2.0, copy_jitter_ns=0, soak_ns=100 * S)
    assert s.phases.loop_stride == 2
    pairs = {split_copy(int(c), 2) for c in s.copy_index}
    assert pairs == {(loop, copy) for loop in range(s.phases.loops_planned) for copy in (0, 1)}


def test_soak_that_would_plan_too_much_is_bad_input(monkeypatch):
    import replayer.plan.schedule as schedule

    monkeypatch.setattr(schedule, "MAX_PLANNED_REQUESTS", 10)
    with pytest.raises(BadInput, match="--soak"):
        plan(soak_ns=1000 * S)


def test_each_loop_is_a_session_chain_of_its_own():
    records = [rec(0, 0, "s", 0), rec(1, 5, "s", 1)]
    rows, s = plan(records, soak_ns=20 * S)
    table = records_to_table(records, True)
    linked: PlanArrays = link_sessions(
        s, np.arange(len(s)), session_codes(table.column("session_id")), rows.turn_index
    )
    assert (
        list(linked.follows_previous) == [0, 1] * s.phases.loops_planned
    )  # turn 1 follows its own loop's turn 0


def test_loop_span_is_first_to_last_plus_the_median_gap():
    assert loop_span_ns(np.array([0, 10, 20, 40]) * S) == 50 * S
    assert loop_span_ns(np.array([7])) == 1_000_000  # one request: 1 ms loops


def test_loop_names_and_completed_loops():
    assert loop_name("r1#c1", 0) == "r1#c1" and loop_name("r1#c1", 2) == "r1#c1#l2"
    assert completed_loops(np.array([0, 0, 1, 1, 2]), np.array([0, 0, 1, 1])) == 2
    assert completed_loops(np.array([0, 1]), np.array([0, 1])) == 2


def test_fresh_loops_send_other_prompts_and_keep_sharing_sends_the_same():
    rows, s = plan(TRACE[:2], soak_ns=30 * S)
    records = TRACE[:2]
    plans = s.plans()
    options = BuildOptions("vllm", None, "m", loop_stride=s.phases.loop_stride)
    sharing = BuildOptions("vllm", None, "m", loop_stride=s.phases.loop_stride, soak_keep_sharing=True)
    first, later = plans[0], next(plans[i] for i in range(len(plans)) if plans[i].copy_index == 1)
    assert prompt_copy(later.copy_index, 1, True) == 0 and prompt_copy(later.copy_index, 1, False) == 1
    fresh = build_request(records[later.record_index], later, options, None).body
    same = build_request(records[later.record_index], later, sharing, None).body
    original = build_request(records[first.record_index], first, options, None).body
    assert b"cache_salt" in fresh and same == original


def test_keep_sharing_without_soak_and_a_to_before_the_warmup_end_are_bad_input():
    with pytest.raises(BadInput, match="--soak-keep-sharing: only with --soak"):
        plan(soak_keep_sharing=True)
    with pytest.raises(BadInput, match="--to: must be later than --warmup"):
        plan(warmup_ns=30 * S, to_offset_ns=20 * S)
