"""The sim thinks: reasoning deltas (either field name) before the answer, counted in usage, stamped
in the ground truth; a forced length covers reasoning and answer."""

from __future__ import annotations

import random
import urllib.request

import orjson
import pyarrow.parquet as pq
import pytest

from llmreplay.sim.config import SimConfig
from llmreplay.sim.openai_request import CompletionRequest, InvalidRequest
from llmreplay.sim.output_length import draw_reasoning_tokens, plan_output, reasoning_share
from llmreplay.sim.wire import ChatEncoder, usage
from llmreplay.sse import SSESplitter
from llmreplay.wire.response import summarize_json, summarize_stream


def _request(max_tokens=None, ignore_eos=False) -> CompletionRequest:
    return CompletionRequest(
        "chat_completions", "m", True, True, ("hi",), None, 1, max_tokens, 0, ignore_eos, None
    )


def _read(stream: bytes):
    splitter = SSESplitter()
    return summarize_stream(
        [(i, payload) for i, payload in enumerate(splitter.feed(stream) + splitter.finish())]
    )


@pytest.mark.parametrize("field", ["reasoning", "reasoning_content"])
@pytest.mark.parametrize("tool", [None, "lookup"])
def test_the_first_tokens_are_reasoning_then_the_answer(field, tool):
    encoder = ChatEncoder("c", 1, "m", tool, "call_1", reasoning_tokens=2, reasoning_field=field)
    stream = encoder.opening() + b"".join(encoder.token(i, 5) for i in range(1, 6))
    shape = _read(stream + encoder.closing("stop", usage(4, 5, 0, 2)))
    assert (len(shape.token_event_ns), shape.first_answer_index, shape.reasoning_events) == (5, 2, 2)
    assert shape.reasoning_text == " the of"
    assert (shape.completion_tokens, shape.reasoning_tokens) == (5, 2)
    assert bool(shape.tool_calls) == (tool is not None)
    framed = b"".join(encoder.token_frame(i, 5) for i in range(1, 3))
    assert field.encode() in framed  # the pre-framed reasoning chunks carry the same key


def test_a_whole_body_keeps_its_reasoning_beside_the_answer():
    encoder = ChatEncoder(
        "c", 1, "m", None, "call_1", reasoning_tokens=3, reasoning_field="reasoning_content"
    )
    body = encoder.body(5, "stop", usage(1, 5, 0, 3))
    message = body["choices"][0]["message"]
    assert message["reasoning_content"] == " the of and" and message["content"] == " the of"
    shape = summarize_json(orjson.dumps(body), "chat_completions")
    assert (shape.reasoning_text, shape.reasoning_tokens) == (" the of and", 3)


def test_without_reasoning_nothing_changes_on_the_wire():
    assert "completion_tokens_details" not in usage(1, 2, 0)
    plain = ChatEncoder("c", 1, "m", None, "x")
    assert plain.token_frame(1, 3) == ChatEncoder("c", 1, "m", None, "x", 0, "reasoning").token_frame(1, 3)


def test_a_forced_length_covers_reasoning_and_answer():
    config = SimConfig(reasoning_tokens=4)
    forced = _request(max_tokens=10, ignore_eos=True)
    tokens, reason = plan_output(forced, config, random.Random(0), 4)
    assert (tokens, reason, reasoning_share(tokens, 4)) == (10, "length", 4)
    assert reasoning_share(10, 25) == 9  # the answer keeps one token
    free = SimConfig(output_len_dist="fixed", output_len_median_tokens=6)
    assert plan_output(_request(), free, random.Random(0), 4) == (10, "stop")


def test_the_header_sets_one_requests_reasoning():
    config = SimConfig(reasoning_tokens=8)
    assert draw_reasoning_tokens(config, random.Random(0), "3") == 3
    assert draw_reasoning_tokens(config, random.Random(0), None) == 8
    spread = SimConfig(reasoning_tokens=100, reasoning_tokens_sigma=0.5)
    draws = {draw_reasoning_tokens(spread, random.Random(seed), None) for seed in range(20)}
    assert len(draws) > 10 and all(d >= 0 for d in draws)
    with pytest.raises(InvalidRequest, match="X-Sim-Reasoning-Tokens"):
        draw_reasoning_tokens(config, random.Random(0), "lots")


@pytest.mark.e2e
def test_a_reasoning_sim_streams_and_logs_both_first_tokens(module_sim):
    sim = module_sim("--reasoning-tokens", "4", "--reasoning-field", "reasoning_content")
    body = {
        "model": "sim-model",
        "messages": [{"role": "user", "content": "why?"}],
        "max_tokens": 10,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    shape = _read(_post(sim.url, body, {"X-Request-Id": "think-1"}))
    assert (len(shape.token_event_ns), shape.first_answer_index, shape.reasoning_tokens) == (10, 4, 4)
    whole = {**body, "stream": False}
    answer = orjson.loads(_post(sim.url, whole, {"X-Request-Id": "think-2", "X-Sim-Reasoning-Tokens": "1"}))
    assert answer["usage"]["completion_tokens_details"] == {"reasoning_tokens": 1}
    assert sim.stop() == 0
    rows = {row["request_id"]: row for row in pq.read_table(sim.log_path).to_pylist()}
    first = rows["think-1"]
    assert (first["reasoning_tokens"], first["completion_tokens"]) == (4, 10)
    assert first["first_answer_mono_ns"] > first["first_token_mono_ns"] > first["arrival_mono_ns"]
    assert rows["think-2"]["reasoning_tokens"] == 1


def _post(url: str, body: dict, headers: dict) -> bytes:
    request = urllib.request.Request(
        f"{url}/v1/chat/completions", orjson.dumps(body), {"Content-Type": "application/json", **headers}
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        return answer.read()
