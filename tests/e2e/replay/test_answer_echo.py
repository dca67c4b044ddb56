"""A turn that sends earlier answers back sends staging's own answers, after the previous turn's
messages word for word (replayer.plan.sent_turns, replayer.loop.answer_echo): seen by a real recorder
in front of the sim, for recorded content and for prompts synthesized from a shape."""

from __future__ import annotations

import dataclasses
import json

import pytest
from replay_helpers import content_record, results, run_replay, write_content_trace

from llmreplay.trace_format import MessageShape, TraceMeta
from llmreplay.trace_io import read_trace, write_trace
from tests.e2e.recorder.test_recorder import start_recorder, stop

pytestmark = pytest.mark.e2e  # every test here starts processes

SYSTEM = "You are terse."
RECORDED_ANSWER = "an answer production gave, which staging never did"
TURNS = 3


def _conversation(s: int, at_ms: float) -> list:
    """Turn k sends the system prompt, every earlier question and production's answer, then a question."""
    records, messages = [], [{"role": "system", "content": SYSTEM}]
    for turn in range(TURNS):
        if turn:
            messages = [*messages, {"role": "assistant", "content": RECORDED_ANSWER}]
        messages = [*messages, {"role": "user", "content": f"question {s} turn {turn} " + "why " * 20 * turn}]
        record = content_record(
            s * TURNS + turn,
            at_ms + turn * 5,
            session_id=f"s{s}",
            turn_index=turn,
            parent_request_id=f"r{s * TURNS + turn - 1}" if turn else None,
            think_time_ns=20_000_000 if turn else None,
            completion_tokens=12,
            prompt_tokens=40 + 30 * turn,
            content_messages=json.dumps(messages),
        )
        shapes = tuple(MessageShape(m["role"], 4 + len(m["content"].split())) for m in messages)
        records.append(dataclasses.replace(record, messages=shapes))
    return records


def _replayed(tmp_path, processes, start_sim, shape: bool) -> list[tuple[list, str]]:
    """(messages, answer) of every conversation request staging got, in the order it got them."""
    records = sorted((r for s in range(3) for r in _conversation(s, s * 40.0)), key=lambda r: r.arrival_time)
    if shape:
        records = [dataclasses.replace(r, content_messages=None) for r in records]
        trace = write_trace(tmp_path / "t.parquet", records, TraceMeta(source="test", block_size=16))
    else:
        trace = write_content_trace(tmp_path / "t.parquet", records)
    sim = start_sim("--profile", "fast")
    seen_dir = tmp_path / "seen"
    proxy, proc = start_recorder(processes, tmp_path, sim, seen_dir, "--content")
    out = tmp_path / "run"
    done = run_replay(trace, proxy, out, "--engine", "vllm", "--session-header", "X-Session-Id")
    stop(proc)
    assert done.returncode in (0, 1), done.stderr
    assert len(results(out)) == 3 * TURNS and all(r["error_kind"] is None for r in results(out))
    rows = sorted(read_trace(seen_dir).table.to_pylist(), key=lambda r: r["arrival_time"])
    sent = [(json.loads(r["content_messages"]), r["content_response"]) for r in rows if r["content_messages"]]
    return [(m, answer) for m, answer in sent if m[0]["role"] == "system" and len(m) % 2 == 0]


@pytest.mark.parametrize("shape", [False, True], ids=["content", "shape"])
def test_each_turn_sends_the_previous_turn_word_for_word_then_stagings_answer(
    tmp_path, processes, start_sim, shape
):
    sent = _replayed(tmp_path, processes, start_sim, shape)
    assert len(sent) == 3 * TURNS
    by_length = {}
    for messages, answer in sent:
        by_length.setdefault(len(messages), []).append((messages, answer))
    for turn in range(1, TURNS):
        for messages, _ in by_length[2 + 2 * turn]:
            previous = [(m, a) for m, a in by_length[2 * turn] if m == messages[: 2 * turn]]
            assert len(previous) == 1, "the previous turn's messages are sent again word for word"
            answer = previous[0][1]
            assert answer and messages[2 * turn] == {"role": "assistant", "content": answer}
            assert RECORDED_ANSWER not in json.dumps(messages) and "llmreplay:answer" not in json.dumps(messages)
