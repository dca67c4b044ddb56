"""A turn that sends the previous answer back sends staging's own answer (replayer.loop.answer_echo),
seen by a real recorder in front of the sim: so staging's cache holds what the next turn reuses."""

from __future__ import annotations

import dataclasses
import json

import pytest
from replay_helpers import content_record, results, run_replay, write_content_trace

from llmreplay.trace_format import MessageShape
from llmreplay.trace_io import read_trace
from tests.recorder.test_recorder_e2e import start_recorder, stop

pytestmark = pytest.mark.e2e  # every test here starts processes

RECORDED_ANSWER = "an answer production gave, which staging never did"


def _conversation(s: int, at_ms: float) -> list:
    first = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": f"question {s}"}]
    second = [*first, {"role": "assistant", "content": RECORDED_ANSWER}, {"role": "user", "content": "why?"}]
    return [
        content_record(
            s * 2, at_ms, session_id=f"s{s}", completion_tokens=12, content_messages=json.dumps(first)
        ),
        content_record(
            s * 2 + 1,
            at_ms + 5,
            session_id=f"s{s}",
            turn_index=1,
            parent_request_id=f"r{s * 2}",
            think_time_ns=20_000_000,
            completion_tokens=12,
            content_messages=json.dumps(second),
        ),
    ]


def _with_shapes(record):
    """The record with message shapes as the recorder writes them (the answer follows its parent's)."""
    messages = json.loads(record.content_messages)
    return dataclasses.replace(record, messages=tuple(MessageShape(m["role"], 4) for m in messages))


def test_next_turn_sends_stagings_own_answer(tmp_path, processes, start_sim):
    records = sorted((r for s in range(3) for r in _conversation(s, s * 30.0)), key=lambda r: r.arrival_time)
    trace = write_content_trace(tmp_path / "t.parquet", [_with_shapes(r) for r in records])
    sim = start_sim("--profile", "fast")
    seen_dir = tmp_path / "seen"
    proxy, proc = start_recorder(processes, tmp_path, sim, seen_dir, "--content")
    out = tmp_path / "run"
    done = run_replay(trace, proxy, out, "--engine", "vllm", "--session-header", "X-Session-Id")
    stop(proc)
    assert done.returncode in (0, 1), done.stderr
    assert all(r["error_kind"] is None for r in results(out))
    sent = [
        (json.loads(r["content_messages"]), r["content_response"])
        for r in read_trace(seen_dir).table.to_pylist()
        if r["content_messages"] and "You are terse." in r["content_messages"]
    ]
    assert len(sent) == 6
    for s in range(3):
        ours = [(m, answer) for m, answer in sent if m[1]["content"] == f"question {s}"]
        (first, answer), (second, _) = sorted(ours, key=lambda pair: len(pair[0]))
        assert len(first) == 2 and len(second) == 4
        assert answer and second[2] == {"role": "assistant", "content": answer}  # staging's, not production's
