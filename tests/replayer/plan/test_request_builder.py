"""Request bodies: recorded content, synthesized shapes with exact prefix sharing, forced lengths."""

from __future__ import annotations

import json

import orjson
import pytest

from llmreplay.errors import BadInput
from llmreplay.tokenizers import load_tokenizer
from llmreplay.trace_format import MessageShape, TraceRecord
from llmreplay.trace_io import records_to_table
from replayer.config import ScheduleConfig
from replayer.plan.prompt_synthesis import BlockSpeller, ExactTextWords
from replayer.plan.request_builder import BuildOptions, build_request
from replayer.plan.schedule import build_schedule, schedule_input

T0 = 1_700_000_000_000_000


@pytest.fixture(scope="module")
def speller():
    return BlockSpeller(ExactTextWords(None), block_size=16)


def record(**kw) -> TraceRecord:
    base = dict(
        request_id="r1",
        arrival_time=T0,
        endpoint="chat_completions",
        prompt_tokens=40,
        token_source="server_usage",
    )
    base.update(kw)
    return TraceRecord(**base)


def plan_for(rec, **config):
    return build_schedule(schedule_input(records_to_table([rec], False)), ScheduleConfig(**config)).plans()


def body(rec, speller=None, engine="openai", copy=0, **config):
    plan = plan_for(rec, scale=2.0 if copy else 1.0, copy_jitter_ns=0, **config)[copy]
    built = build_request(rec, plan, BuildOptions(engine=engine, model=None, default_model="m"), speller)
    return built, orjson.loads(built.body)


def test_content_trace_sends_recorded_fields_and_forces_length_for_vllm():
    messages = [{"role": "user", "content": "hi"}]
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {}}}]
    rec = record(
        content_messages=json.dumps(messages),
        content_tools=json.dumps(tools),
        tool_choice="function",
        stream=True,
        completion_tokens=33,
        temperature=0.5,
        model="prod-model",
        content_response_format=json.dumps({"type": "json_object"}),
        structured_output="json_object",
    )
    built, sent = body(rec, engine="vllm")
    assert built.path == "/v1/chat/completions" and built.requested_completion_tokens == 33
    assert sent["messages"] == messages and sent["tools"] == tools and sent["model"] == "prod-model"
    assert sent["tool_choice"] == {"type": "function", "function": {"name": "lookup"}}
    assert sent["stream_options"] == {"include_usage": True} and sent["response_format"] == {
        "type": "json_object"
    }
    assert sent["max_tokens"] == 33 and sent["min_tokens"] == 33 and sent["ignore_eos"] is True
    assert sent["temperature"] == 0.5


def test_openai_engine_gets_standard_fields_only():
    _, sent = body(record(content_messages="[]", completion_tokens=5))
    assert "ignore_eos" not in sent and "min_tokens" not in sent and sent["max_tokens"] == 5


@pytest.mark.parametrize(
    ("engine", "forced"),
    [
        ("sglang", {"ignore_eos": True, "min_tokens": 7}),
        ("trtllm", {"ignore_eos": True, "min_tokens": 7}),
        ("llamacpp", {"ignore_eos": True, "n_predict": 7}),
        ("ollama", {}),
        ("tgi", {}),
    ],
)
def test_each_engine_row_forces_length_with_its_own_fields(engine, forced):
    _, sent = body(record(content_messages="[]", completion_tokens=7), engine=engine)
    extra = {k: v for k, v in sent.items() if k not in ("model", "messages", "stream", "max_tokens")}
    assert sent["max_tokens"] == 7 and extra == forced


def test_llamacpp_cancel_mirroring_keeps_its_limit_at_the_room_asked_for():
    rec = record(content_messages="[]", stream=True, completion_tokens=4, error_kind="client_disconnected")
    built, sent = body(rec, engine="llamacpp")
    assert sent["n_predict"] == sent["max_tokens"] == built.requested_completion_tokens > 4


def test_cancel_mirroring_leaves_room_past_the_cancel_point():
    rec = record(content_messages="[]", stream=True, completion_tokens=4, error_kind="client_disconnected")
    built, sent = body(rec, engine="vllm")
    assert built.requested_completion_tokens > 4 and "min_tokens" not in sent


def test_synthesized_prompts_share_exactly_the_shared_blocks(speller):
    tok = load_tokenizer(None)
    shapes = (MessageShape("system", 20), MessageShape("user", 20))
    a = record(request_id="a", messages=shapes, prefix_block_hashes=(11, 22, 33))
    b = record(request_id="b", messages=shapes, prefix_block_hashes=(11, 99, 44))  # chained: differ after 0
    _, ja = body(a, speller)
    _, jb = body(b, speller)
    for sent in (ja, jb):
        assert [tok.count(m["content"]) for m in sent["messages"]] == [20, 20]
    words_a = (ja["messages"][0]["content"] + ja["messages"][1]["content"]).split(" ")[1:]
    words_b = (jb["messages"][0]["content"] + jb["messages"][1]["content"]).split(" ")[1:]
    assert words_a[:16] == words_b[:16]  # block 0 shared
    assert words_a[16:32] != words_b[16:32]
    assert words_a[32:] != words_b[32:]


def test_copies_share_nothing_with_the_original(speller):
    rec = record(messages=(MessageShape("user", 16),), prefix_block_hashes=(11,), prompt_tokens=16)
    _, original = body(rec, speller)
    _, copy = body(rec, speller, copy=1)
    assert original["messages"][0]["content"].split()[0] != copy["messages"][0]["content"].split()[0]


def test_imported_trace_without_messages_gets_one_user_message(speller):
    rec = record(prompt_tokens=20, prefix_block_hashes=(5, 6))
    _, sent = body(rec, speller)
    assert [m["role"] for m in sent["messages"]] == ["user"]
    assert load_tokenizer(None).count(sent["messages"][0]["content"]) == 20


def test_shape_row_without_synthesis_and_bad_content_are_bad_input():
    with pytest.raises(BadInput, match="synthesis"):
        body(record(messages=(MessageShape("user", 3),)))
    with pytest.raises(BadInput, match="content_messages"):
        body(record(content_messages="{not json"))
