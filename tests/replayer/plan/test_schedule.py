"""Schedule and session planning: pure functions checked with tiny hand-made traces."""

from __future__ import annotations

import numpy as np

from llmreplay.trace_format import TraceRecord
from llmreplay.trace_io import records_to_table
from replayer.config import ScheduleConfig
from replayer.plan.arrays import NONE
from replayer.plan.schedule import (
    build_schedule,
    compress_idle_gaps,
    copies_per_session,
    copy_jitter_ns,
    copy_name,
    schedule_input,
)
from replayer.plan.sessions import link_sessions, session_codes, session_due_ns, shard_by_session, worker_of

T0 = 1_700_000_000_000_000


def rec(i: int, at_ms: int, session: str | None = None, turn: int = 0, **kw) -> TraceRecord:
    return TraceRecord(
        request_id=f"r{i}",
        arrival_time=T0 + at_ms * 1000,
        endpoint="chat_completions",
        prompt_tokens=10,
        token_source="server_usage",
        session_id=session,
        turn_index=turn,
        **kw,
    )


def plan(records, **config):
    rows = schedule_input(records_to_table(records, False))
    return rows, build_schedule(rows, ScheduleConfig(**config))


def ids(records, schedule) -> list[str]:
    return [
        copy_name(records[r].request_id, k)
        for r, k in zip(schedule.record_index, schedule.copy_index, strict=True)
    ]


def keys(rows, schedule) -> list[str]:
    base = rows.session_keys.to_pylist()
    return [copy_name(base[r], k) for r, k in zip(schedule.record_index, schedule.copy_index, strict=True)]


def sharded_and_linked(records, rows, schedule, workers: int):
    """Check every plan went to the worker of its session key; link the whole schedule as one worker."""
    plan_keys = keys(rows, schedule)
    shards = shard_by_session(schedule, rows.session_keys, workers)
    assert sorted(np.concatenate(shards).tolist()) == list(range(len(schedule)))
    for worker, positions in enumerate(shards):
        assert all(worker_of(plan_keys[p], workers) == worker for p in positions)
    codes = session_codes(records_to_table(records, False).column("session_id"))
    return plan_keys, link_sessions(schedule, np.arange(len(schedule)), codes, rows.turn_index)


def test_offsets_follow_the_trace_divided_by_speed():
    _, schedule = plan([rec(0, 0), rec(1, 100), rec(2, 250)], speed=2.0)
    assert schedule.scheduled_offset_ns.tolist() == [0, 50_000_000, 125_000_000]


def test_window_and_limit_rebase_to_the_first_selected_request():
    records = [rec(i, i * 1000) for i in range(10)]
    _, schedule = plan(records, from_offset_ns=3_000_000_000, to_offset_ns=7_000_000_000, limit=3)
    assert ids(records, schedule) == ["r3", "r4", "r5"]
    assert schedule.scheduled_offset_ns[0] == 0 and schedule.source_rows == 3


def test_idle_gaps_are_capped_and_the_removed_time_reported():
    offsets, removed = compress_idle_gaps(np.array([0, 10, 110, 115, 1115]), 20)
    assert offsets.tolist() == [0, 10, 30, 35, 55]
    assert removed == 80 + 980


def test_scale_half_keeps_exactly_half_the_sessions_deterministically():
    records = [rec(i, i) for i in range(100)]
    _, a = plan(records, scale=0.5, seed=7)
    _, b = plan(records, scale=0.5, seed=7)
    assert len(a) == 50
    assert ids(records, a) == ids(records, b)


def test_scale_two_copies_whole_sessions_with_bounded_jitter_and_new_ids():
    records = [rec(0, 0, "s1", 0), rec(1, 1000, "s1", 1), rec(2, 500)]
    rows, schedule = plan(records, scale=2.0, copy_jitter_ns=200_000_000)
    assert len(schedule) == 6
    copies = np.flatnonzero(schedule.copy_index == 1)
    assert {ids(records, schedule)[p] for p in copies} == {"r0#c1", "r1#c1", "r2#c1"}
    assert {keys(rows, schedule)[p] for p in copies if schedule.record_index[p] != 2} == {"s1#c1"}
    s1 = sorted((p for p in copies if schedule.record_index[p] != 2), key=lambda p: schedule.record_index[p])
    # the copy moves as a block: turn spacing kept (unless clamped at 0)
    shift = int(schedule.scheduled_offset_ns[s1[1]]) - 1_000_000_000
    assert abs(shift) <= 200_000_000
    assert schedule.scheduled_offset_ns[s1[0]] == max(0, shift)
    assert (np.diff(schedule.scheduled_offset_ns) >= 0).all()


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
        rec(2, 2, stream=True, completion_tokens=0, e2e_ns=4_000, error_kind="client_disconnected"),
        rec(3, 3, stream=True, completion_tokens=9, e2e_ns=4_000),
    ]
    _, schedule = plan(records)
    assert schedule.cancel_after_tokens.tolist() == [7, NONE, NONE, NONE]
    assert schedule.cancel_after_ns.tolist() == [NONE, 5_000_000, 4_000, NONE]
    _, off = plan(records, cancellations=False)
    assert (off.cancel_after_tokens == NONE).all() and (off.cancel_after_ns == NONE).all()


def test_think_time_is_divided_by_speed():
    _, schedule = plan([rec(0, 0, "a", 0), rec(1, 10, "a", 1, think_time_ns=3_000_001)], speed=2.0)
    assert schedule.think_time_ns.tolist() == [NONE, 1_500_000]


def test_sessions_chain_turns_and_shard_whole_sessions():
    records = [rec(0, 0, "a", 0), rec(1, 10, "b", 0), rec(2, 20, "a", 1), rec(3, 30, "a", 2), rec(4, 40)]
    rows, schedule = plan(records)
    plan_keys, linked = sharded_and_linked(records, rows, schedule, 3)
    a = [linked[i] for i in range(5) if plan_keys[i] == "a"]
    assert [p.follows_previous for p in a] == [False, True, True]
    assert a[0].next_index == a[1].index and a[1].next_index == a[2].index and a[2].next_index is None
    assert linked[1].next_index is None and linked[4].next_index is None


def test_copies_of_a_session_are_sharded_and_chained_as_sessions_of_their_own():
    records = [rec(0, 0, "a", 0), rec(1, 10, "a", 1)]
    rows, schedule = plan(records, scale=2.0, copy_jitter_ns=0)
    plan_keys, linked = sharded_and_linked(records, rows, schedule, 4)
    chains = {(plan_keys[i], linked[i].next_index) for i in range(4)}
    first = {k: i for i, k in enumerate(plan_keys) if schedule.record_index[i] == 0}
    second = {k: i for i, k in enumerate(plan_keys) if schedule.record_index[i] == 1}
    assert chains == {("a", second["a"]), ("a#c1", second["a#c1"]), ("a", None), ("a#c1", None)}
    assert first.keys() == {"a", "a#c1"}


def test_follow_up_waits_for_answer_plus_think_time():
    assert session_due_ns(100, 50, 20) == 100
    assert session_due_ns(100, 90, 20) == 110
    assert session_due_ns(100, 90, None) == 100
