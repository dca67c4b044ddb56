"""--responses-state: which chained turns carry the placeholder, which are expanded, and what is counted,
in the builder (from the linked plans) and in the preflight (from the trace's columns) alike."""

from __future__ import annotations

import json

import pyarrow as pa

from llmreplay.trace_format import TraceMeta, TraceRecord
from llmreplay.trace_io import records_to_table, write_trace
from replayer.config import ScheduleConfig
from replayer.plan.chained_turns import chained_turns
from replayer.plan.prepare import Shard
from replayer.plan.responses_state import (
    CHAINED,
    EXPANDED,
    PLAIN,
    ancestors,
    sending_modes,
    state_summary,
    summary_line,
)
from replayer.plan.schedule import build_schedule, schedule_input
from replayer.plan.sessions import link_sessions, session_codes
from replayer.preflight import chained_turns_summary

T0 = 1_700_000_000_000_000


def test_a_turn_is_chained_only_when_its_parent_was_sent_just_before_it():
    states = [None, "previous_response_id", "previous_response_id", "conversation"]
    parents = [None, "a", "a", None]
    previous = [None, "a", "b", "c"]
    assert sending_modes(states, parents, previous, "chain") == [PLAIN, CHAINED, EXPANDED, EXPANDED]
    assert sending_modes(states, parents, previous, "expand") == [PLAIN, EXPANDED, EXPANDED, EXPANDED]


def test_ancestors_root_first_and_a_cycle_ends():
    assert ancestors("c", {"c": "b", "b": "a"}) == ["a", "b"]
    assert ancestors("a", {"a": "b", "b": "a"}) == ["b"]


def test_the_summary_counts_each_way_of_sending():
    summary = state_summary("chain", [PLAIN, CHAINED, EXPANDED, CHAINED], 1)
    assert summary == {"mode": "chain", "chained": 2, "expanded": 1, "expanded_parent_not_previous": 1}
    assert "parent not the session's previous turn" in summary_line(summary)


def turn(k: int, parent: int | None, **kw) -> TraceRecord:
    return TraceRecord(
        request_id=f"t{k}",
        session_id="s",
        turn_index=k,
        parent_request_id=None if parent is None else f"t{parent}",
        server_state=None if parent is None else "previous_response_id",
        arrival_time=T0 + k * 1000,
        endpoint="responses",
        prompt_tokens=10,
        token_source="server_usage",
        content_messages=json.dumps(f"turn {k}"),
        content_response=f"answer {k}",
        **kw,
    )


def session() -> list[TraceRecord]:
    # t3 answers t1, not t2 (a branch): it cannot be chained to the turn sent before it
    return [turn(0, None), turn(1, 0), turn(2, 1), turn(3, 1)]


def test_builder_and_preflight_agree_on_a_branched_session(tmp_path):
    records = session()
    path = write_trace(tmp_path / "t.parquet", records, TraceMeta(source="test", content=True))
    table = records_to_table(records, True)
    schedule = build_schedule(schedule_input(table), ScheduleConfig())
    positions = pa.array(range(len(records))).to_numpy()
    codes = session_codes(table.column("session_id"))
    plans = link_sessions(schedule, positions, codes, table.column("turn_index").to_numpy())
    shard = Shard(plans, plans.record_index, "unused", "unused")
    turns = chained_turns(str(path), [shard], "chain")
    assert [turns.sending(0, i) for i in range(4)] == [PLAIN, CHAINED, CHAINED, EXPANDED]
    assert [r.request_id for r in turns.history(records[3])] == ["t0", "t1"]
    expected = {"mode": "chain", "chained": 2, "expanded": 1, "expanded_parent_not_previous": 1}
    assert turns.summary == expected
    assert chained_turns_summary(table, schedule.record_index, "chain") == expected


def test_a_trace_without_server_state_reads_nothing_more(tmp_path):
    records = [turn(0, None)]
    path = write_trace(tmp_path / "t.parquet", records, TraceMeta(source="test", content=True))
    assert chained_turns(str(path), [], "chain") is None
    assert chained_turns_summary(records_to_table(records, True), [0], "chain") is None
