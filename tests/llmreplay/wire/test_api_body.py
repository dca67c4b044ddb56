"""Responses and Messages bodies: recorded content in each API's own arrays, shapes spelled in the API's
shape, lengths forced with its fields, tool_choice and formats in its vocabulary, chained turns."""

from __future__ import annotations

import json

import orjson
import pytest

from llmreplay.trace_format import MessageShape, TraceRecord
from llmreplay.trace_io import records_to_table
from llmreplay.wire import api_body
from llmreplay.wire.dialects import DIALECTS, dialect_for
from llmreplay.wire.responses_api import PREVIOUS_RESPONSE_PLACEHOLDER
from replayer.config import ScheduleConfig
from replayer.plan.prompt_synthesis import BlockSpeller, ExactTextWords
from replayer.plan.request_builder import BUILDERS, BuildOptions, build_request
from replayer.plan.responses_state import CHAINED, EXPANDED
from replayer.plan.schedule import build_schedule, schedule_input

T0 = 1_700_000_000_000_000


@pytest.fixture(scope="module")
def speller():
    return BlockSpeller(ExactTextWords(None), block_size=16)


def record(endpoint: str, **kw) -> TraceRecord:
    base = dict(
        request_id="r1", arrival_time=T0, endpoint=endpoint, prompt_tokens=40, token_source="server_usage"
    )
    return TraceRecord(**{**base, **kw})


def body(rec, speller=None, engine="vllm", sending=0, history=()):
    plan = build_schedule(schedule_input(records_to_table([rec], False)), ScheduleConfig()).plans()[0]
    options = BuildOptions(engine=engine, model=None, default_model="m")
    built = build_request(rec, plan, options, speller, None, sending, history)
    return built, orjson.loads(built.body)


def test_responses_content_is_sent_as_recorded_with_its_length_fields():
    items = [
        {"role": "user", "content": "hi"},
        {"type": "function_call_output", "call_id": "c1", "output": "42"},
    ]
    tools = [{"type": "function", "name": "lookup", "parameters": {}}]
    fmt = {"type": "json_schema", "name": "x", "schema": {"type": "object"}}
    rec = record(
        "responses",
        content_messages=json.dumps(items),
        content_system=json.dumps("be brief"),
        content_tools=json.dumps(tools),
        content_response_format=json.dumps(fmt),
        tool_choice="function",
        completion_tokens=33,
        stream=True,
        temperature=0.5,
        n=1,
    )
    built, sent = body(rec)
    assert built.path == "/v1/responses" and built.requested_completion_tokens == 33
    assert sent["input"] == items and sent["instructions"] == "be brief" and sent["tools"] == tools
    assert sent["tool_choice"] == {"type": "function", "name": "lookup"}
    assert sent["text"] == {"format": fmt}
    # vLLM's ResponsesRequest: max_output_tokens and ignore_eos, no min_tokens; no stream_options, no n
    assert sent["max_output_tokens"] == 33 and sent["ignore_eos"] is True
    assert "min_tokens" not in sent and "max_tokens" not in sent and "stream_options" not in sent
    assert "n" not in sent and sent["temperature"] == 0.5 and sent["stream"] is True


def test_a_string_input_stays_a_string():
    _, sent = body(record("responses", content_messages=json.dumps("hello"), completion_tokens=4))
    assert sent["input"] == "hello"


def test_messages_content_keeps_system_and_blocks_and_sends_max_tokens_only_on_vllm():
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "hi"}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]},
    ]
    tools = [{"name": "f", "description": "", "input_schema": {"type": "object"}}]
    rec = record(
        "messages",
        content_messages=json.dumps(messages),
        content_system=json.dumps([{"type": "text", "text": "sys"}]),
        content_tools=json.dumps(tools),
        tool_choice="required",
        completion_tokens=12,
    )
    built, sent = body(rec)
    assert built.path == "/v1/messages"
    assert sent["messages"] == messages and sent["system"] == [{"type": "text", "text": "sys"}]
    assert sent["tool_choice"] == {"type": "any"} and sent["tools"] == tools
    # AnthropicMessagesRequest has neither ignore_eos nor min_tokens: max_tokens alone
    assert sent["max_tokens"] == 12 and "ignore_eos" not in sent and "min_tokens" not in sent


def test_messages_always_carry_max_tokens():
    _, sent = body(record("messages", content_messages=json.dumps([{"role": "user", "content": "x"}])))
    assert sent["max_tokens"] > 0


@pytest.mark.parametrize("endpoint", ["responses", "messages"])
def test_shapes_are_spelled_in_the_api_shape_and_read_back_as_the_shape(speller, endpoint):
    shapes = (MessageShape("system", 8), MessageShape("user", 20), MessageShape("tool", 12))
    rec = record(
        endpoint,
        messages=shapes,
        prompt_tokens=40,
        tools_count=2,
        tool_definition_tokens=80,
        tool_choice="function",
        structured_output="json_schema",
        schema_tokens=10,
        completion_tokens=5,
    )
    _, sent = body(rec, speller)
    dialect = dialect_for(endpoint)
    roles = [m.role for m in dialect.request_messages(sent)]
    # the recorder reads the spelled body back as the shape (a Messages tool_result is a user message)
    assert roles == ["system", "user", "tool" if endpoint == "responses" else "user"]
    assert len(dialect.request_tools(sent)) == 2 and dialect.request_tool_choice(sent) == "function"
    assert dialect.request_structured(sent)[0] == "json_schema"
    assert dialect.max_output_tokens(sent) == 5


def test_messages_json_object_becomes_an_open_schema(speller):
    rec = record("messages", messages=(MessageShape("user", 10),), structured_output="json_object")
    _, sent = body(rec, speller)
    assert sent["output_config"] == {"format": {"type": "json_schema", "schema": {"type": "object"}}}


def test_a_chained_turn_carries_the_placeholder_and_only_its_own_input():
    rec = record(
        "responses",
        content_messages=json.dumps([{"role": "user", "content": "and then?"}]),
        server_state="previous_response_id",
        parent_request_id="r0",
    )
    _, sent = body(rec, sending=CHAINED)
    assert sent["previous_response_id"] == PREVIOUS_RESPONSE_PLACEHOLDER
    assert sent["input"] == [{"role": "user", "content": "and then?"}]


def test_an_expanded_turn_carries_its_ancestors_input_and_output_and_no_id():
    root = record(
        "responses",
        request_id="r0",
        content_messages=json.dumps("first"),
        content_response="answer one",
        content_tool_calls=json.dumps(
            [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]
        ),
    )
    middle = record(
        "responses",
        request_id="r1",
        content_messages=json.dumps([{"type": "function_call_output", "call_id": "c1", "output": "7"}]),
        content_response="answer two",
        server_state="previous_response_id",
        parent_request_id="r0",
    )
    last = record(
        "responses",
        request_id="r2",
        content_messages=json.dumps("third"),
        server_state="previous_response_id",
        parent_request_id="r1",
    )
    _, sent = body(last, sending=EXPANDED, history=(root, middle))
    assert "previous_response_id" not in sent
    assert sent["input"] == [
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "answer one"},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "7"},
        {"role": "assistant", "content": "answer two"},
        {"role": "user", "content": "third"},
    ]


def test_an_expanded_shape_turn_is_the_ancestors_spelled_turns_then_its_own(speller):
    root = record("responses", request_id="r0", messages=(MessageShape("user", 10),), completion_tokens=6)
    rec = record(
        "responses",
        messages=(MessageShape("system", 4), MessageShape("user", 8)),
        server_state="previous_response_id",
        parent_request_id="r0",
    )
    _, alone = body(root, speller)
    _, sent = body(rec, speller, sending=EXPANDED, history=(root,))
    assert [m.role for m in dialect_for("responses").request_messages(sent)] == [
        "system", "user", "assistant", "user",
    ]  # fmt: skip
    assert sent["input"][0] == alone["input"][0]  # the root's turn spelled as it was sent alone


def test_every_api_names_a_way_of_building_the_builder_has():
    assert set(BUILDERS) == set(api_body.BUILDERS)
    assert all(dialect.body.builder in BUILDERS for dialect in DIALECTS.values())
