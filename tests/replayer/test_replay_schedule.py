"""Schedule and session planning: pure functions checked with tiny hand-made traces."""

from __future__ import annotations

from llmreplay.trace_format import TraceRecord
from replayer.config import ScheduleConfig
from replayer.schedule import build_schedule, compress_idle_gaps, copies_per_session, copy_jitter_ns
from replayer.sessions import link_sessions, session_due_ns, shard_by_session, worker_of

T0 = 1_700_000_000_000_000


def rec(i: int, at_ms: int, session: str | None = None, turn: int = 0, **kw) -> TraceRecord:
    return TraceRecord(
        request_id=f"r{i}",
        arrival_time_us=T0 + at_ms * 1000,
        endpoint="chat_completions",
        prompt_tokens=10,
        token_source="server_usage",
        session_id=session,
        turn_index=turn,
        **kw,
    )


def test_offsets_follow_the_trace_divided_by_speed():
    records = [rec(0, 0), rec(1, 100), rec(2, 250)]
    plan = build_schedule(records, ScheduleConfig(speed=2.0))
    assert [p.scheduled_offset_ns for p in plan.requests] == [0, 50_000_000, 125_000_000]


def test_window_and_limit_rebase_to_the_first_selected_request():
    records = [rec(i, i * 1000) for i in range(10)]
    plan = build_schedule(
        records, ScheduleConfig(from_offset_ns=3_000_000_000, to_offset_ns=7_000_000_000, limit=3)
    )
    assert [p.request_id for p in plan.requests] == ["r3", "r4", "r5"]
    assert plan.requests[0].scheduled_offset_ns == 0


def test_idle_gaps_are_capped_and_the_removed_time_reported():
    offsets, removed = compress_idle_gaps([0, 10, 110, 115, 1115], 20)
    assert offsets == [0, 10, 30, 35, 55]
    assert removed == 80 + 980


def test_scale_half_keeps_exactly_half_the_sessions_deterministically():
    records = [rec(i, i) for i in range(100)]
    a = build_schedule(records, ScheduleConfig(scale=0.5, seed=7))
    b = build_schedule(records, ScheduleConfig(scale=0.5, seed=7))
    assert len(a.requests) == 50
    assert [p.request_id for p in a.requests] == [p.request_id for p in b.requests]


def test_scale_two_copies_whole_sessions_with_bounded_jitter_and_new_ids():
    records = [rec(0, 0, "s1", 0), rec(1, 1000, "s1", 1), rec(2, 500)]
    plan = build_schedule(records, ScheduleConfig(scale=2.0, copy_jitter_ns=200_000_000))
    assert len(plan.requests) == 6
    copies = [p for p in plan.requests if p.copy_index == 1]
    assert {p.request_id for p in copies} == {"r0#c1", "r1#c1", "r2#c1"}
    assert {p.session_key for p in copies if p.source_request_id != "r2"} == {"s1#c1"}
    s1 = sorted((p for p in copies if p.session_key == "s1#c1"), key=lambda p: p.turn_index)
    # the copy moves as a block: turn spacing kept (unless clamped at 0)
    shift = s1[1].scheduled_offset_ns - 1_000_000_000
    assert abs(shift) <= 200_000_000
    assert s1[0].scheduled_offset_ns == max(0, shift)


def test_fractional_scale_gives_round_of_scale_times_sessions():
    counts = copies_per_session([f"s{i}" for i in range(10)], 1.5, seed=0)
    assert sum(counts.values()) == 15 and set(counts.values()) == {1, 2}


def test_copy_zero_is_never_jittered():
    assert copy_jitter_ns(0, "s", 0, 10**9) == 0
    assert all(abs(copy_jitter_ns(s, "k", 1, 1000)) <= 1000 for s in range(200))


def test_client_disconnects_become_cancellations_unless_disabled():
    records = [
        rec(0, 0, stream=True, completion_tokens=7, error_kind="client_disconnected"),
        rec(1, 1, stream=False, e2e_ns=5_000_000, error_kind="client_disconnected"),
    ]
    plan = build_schedule(records, ScheduleConfig())
    assert plan.requests[0].cancel_after_tokens == 7 and plan.requests[0].cancel_after_ns is None
    assert plan.requests[1].cancel_after_ns == 5_000_000
    off = build_schedule(records, ScheduleConfig(cancellations=False))
    assert all(p.cancel_after_tokens is None and p.cancel_after_ns is None for p in off.requests)


def test_sessions_chain_turns_and_shard_whole_sessions():
    records = [rec(0, 0, "a", 0), rec(1, 10, "b", 0), rec(2, 20, "a", 1), rec(3, 30, "a", 2), rec(4, 40)]
    plan = build_schedule(records, ScheduleConfig())
    shards = shard_by_session(plan.requests, 3)
    assert sum(len(s) for s in shards) == 5
    for shard in shards:
        assert len({worker_of(p.session_key, 3) for p in shard}) <= 1
    linked = link_sessions(plan.requests)
    a = [p for p in linked if p.session_key == "a"]
    assert [p.follows_previous for p in a] == [False, True, True]
    assert a[0].next_index == a[1].index and a[1].next_index == a[2].index and a[2].next_index is None


def test_follow_up_waits_for_answer_plus_think_time():
    assert session_due_ns(100, 50, 20) == 100
    assert session_due_ns(100, 90, 20) == 110
    assert session_due_ns(100, 90, None) == 100
