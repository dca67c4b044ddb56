"""The dialect table: each API's request fields, usage and whole answers read into the shared shapes."""

from __future__ import annotations

import pytest

from llmreplay import trace_format
from llmreplay.wire.channels import ANSWER, REASONING
from llmreplay.wire.dialects import DIALECTS, dialect_for
from llmreplay.wire.endpoints import ENDPOINTS, REPLAY_PATHS, dialect_for_path, endpoint_for_path
from llmreplay.wire.usage import Usage, merge_usage, parse_usage

RESPONSES, MESSAGES = dialect_for("responses"), dialect_for("messages")


def test_every_endpoint_names_a_dialect_and_both_new_apis_replay():
    assert all(endpoint.dialect in DIALECTS for endpoint in ENDPOINTS)
    assert REPLAY_PATHS["responses"] == "/v1/responses" and REPLAY_PATHS["messages"] == "/v1/messages"
    assert endpoint_for_path("/gateway/v1/messages?beta=true") == "messages"
    assert dialect_for_path("/v1/responses") == "responses" and dialect_for_path("/x/chat") == "chat"


def test_the_api_table_and_the_trace_vocabulary_name_the_same_endpoints():
    """A row's value must be in the trace format (a minor version adds it); a value without a row
    could be recorded but not read."""
    assert tuple(endpoint.name for endpoint in ENDPOINTS) == trace_format.ENDPOINTS
    assert all(endpoint.api.BODY.endpoint == endpoint.name for endpoint in ENDPOINTS)


def test_responses_input_items_in_prompt_order():
    body = {
        "instructions": "Be brief.",
        "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "Hi"}, {"type": "input_image"}]},
            {"type": "reasoning", "summary": [{"type": "summary_text", "text": "think"}]},
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": '{"a":1}'},
            {"type": "function_call_output", "call_id": "c1", "output": "42"},
            {"type": "item_reference", "id": "msg_1"},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]},
        ],
    }
    assert RESPONSES.request_messages(body) == (
        ("system", "Be brief."),
        ("user", "Hi"),
        ("assistant", "think"),
        ("assistant", 'f{"a":1}'),
        ("tool", "42"),
        ("assistant", "ok"),
    )
    assert RESPONSES.request_messages({"input": "just text"}) == (("user", "just text"),)


def test_messages_blocks_in_prompt_order_images_and_redacted_thinking_count_nothing():
    body = {
        "system": [{"type": "text", "text": "S1"}, {"type": "text", "text": "S2"}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Hi"}, {"type": "image", "source": {}}]},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "hm", "signature": "sig"},
                    {"type": "redacted_thinking", "data": "enc"},
                    {"type": "tool_use", "id": "t1", "name": "f", "input": {"a": 1}},
                ],
            },
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "42"}]},
        ],
    }
    assert MESSAGES.request_messages(body) == (
        ("system", "S1\nS2"),
        ("user", "Hi"),
        ("assistant", 'hm\nf{"a":1}'),
        ("user", "42"),
    )


@pytest.mark.parametrize(
    ("dialect", "body", "expected"),
    [
        ("responses", {"tool_choice": {"type": "function", "name": "f"}}, "function"),
        ("responses", {"tool_choice": "required"}, "required"),
        ("responses", {"tool_choice": {"type": "allowed_tools", "mode": "auto", "tools": []}}, "auto"),
        ("messages", {"tool_choice": {"type": "any"}}, "required"),
        ("messages", {"tool_choice": {"type": "tool", "name": "f"}}, "function"),
        ("messages", {"tool_choice": {"type": "none"}}, "none"),
        ("chat", {"tool_choice": {"type": "function", "function": {"name": "f"}}}, "function"),
    ],
)
def test_tool_choice_in_the_trace_vocabulary(dialect, body, expected):
    assert DIALECTS[dialect].request_tool_choice(body) == expected


def test_tools_schemas_and_lengths_normalised():
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    responses = {
        "tools": [{"type": "function", "name": "f", "description": "d", "parameters": schema}],
        "text": {"format": {"type": "json_schema", "name": "x", "schema": schema}},
        "max_output_tokens": 64,
    }
    messages = {
        "tools": [{"name": "f", "description": "d", "input_schema": schema}],
        "output_format": {"type": "json_schema", "schema": schema},
        "max_tokens": 64,
    }
    for name, body in (("responses", responses), ("messages", messages)):
        dialect = DIALECTS[name]
        assert dialect.request_tools(body) == ({"name": "f", "description": "d", "parameters": schema},)
        assert dialect.request_structured(body) == ("json_schema", schema)
        assert dialect.max_output_tokens(body) == 64


def test_server_state_of_a_chained_or_conversation_turn():
    assert RESPONSES.server_state({"previous_response_id": "resp_1"}) == ("previous_response_id", "resp_1")
    assert RESPONSES.server_state({"conversation": {"id": "conv_1"}}) == ("conversation", "conv_1")
    assert RESPONSES.server_state({"input": "x"}) == (None, None)
    assert MESSAGES.server_state({"messages": []}) == (None, None)


def test_usage_normalised_prompt_is_what_the_engine_processed():
    anthropic = {"input_tokens": 3, "cache_read_input_tokens": 10, "cache_creation_input_tokens": 5}
    assert parse_usage({**anthropic, "output_tokens": 7}) == Usage(18, 7, 10, None, 5)
    responses = {
        "input_tokens": 10,
        "output_tokens": 5,
        "input_tokens_details": {"cached_tokens": 4},
        "output_tokens_details": {"reasoning_tokens": 2},
    }
    assert parse_usage(responses) == Usage(10, 5, 4, 2, None)
    assert parse_usage({"input_tokens": 3, "output_tokens": 1}) == Usage(3, 1)
    # message_start's usage, then message_delta's running totals
    merged = merge_usage({**anthropic, "output_tokens": 1}, {"output_tokens": 9})
    assert parse_usage(merged) == Usage(18, 9, 10, None, 5)


def test_event_channels_of_both_grammars():
    assert RESPONSES.event_channel(None, {"type": "response.output_text.delta", "delta": "Hi"}) == ANSWER
    assert RESPONSES.event_channel(None, {"type": "response.output_text.delta", "delta": ""}) is None
    assert RESPONSES.event_channel(None, {"type": "response.reasoning_text.delta", "delta": "h"}) == REASONING
    added = {"type": "response.output_item.added", "item": {"type": "function_call", "name": "f"}}
    assert RESPONSES.event_channel(None, added) == ANSWER
    delta = {"type": "content_block_delta", "index": 0}
    assert MESSAGES.event_channel(None, {**delta, "delta": {"type": "text_delta", "text": "a"}}) == ANSWER
    assert MESSAGES.event_channel(None, {**delta, "delta": {"type": "input_json_delta", "partial_json": "{"}})
    assert (
        MESSAGES.event_channel(None, {**delta, "delta": {"type": "thinking_delta", "thinking": "x"}})
        == REASONING
    )
    assert (
        MESSAGES.event_channel(None, {**delta, "delta": {"type": "signature_delta", "signature": "s"}})
        is None
    )
    start = {"type": "content_block_start", "content_block": {"type": "tool_use", "id": "t", "name": "f"}}
    assert MESSAGES.event_channel(None, start) == ANSWER


def test_whole_answers_normalised():
    response = {
        "id": "resp_1",
        "status": "incomplete",
        "incomplete_details": {"reason": "max_output_tokens"},
        "output": [
            {"type": "reasoning", "content": [{"type": "reasoning_text", "text": "r"}]},
            {"type": "message", "content": [{"type": "output_text", "text": "Hel"}]},
        ],
        "usage": {"input_tokens": 4, "output_tokens": 2},
    }
    answer = RESPONSES.answer(response)
    assert (answer.text, answer.reasoning_text, answer.finish_reason, answer.response_id) == (
        "Hel",
        "r",
        "length",
        "resp_1",
    )
    calls = {
        "id": "r",
        "status": "completed",
        "output": [{"type": "function_call", "call_id": "c", "name": "f"}],
    }
    assert RESPONSES.answer(calls).tool_calls == (
        {"id": "c", "type": "function", "function": {"name": "f", "arguments": ""}},
    )
    assert RESPONSES.answer(calls).finish_reason == "tool_calls"
    message = {
        "id": "msg_1",
        "content": [{"type": "text", "text": "a"}, {"type": "tool_use", "id": "t", "name": "f", "input": {}}],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 1, "cache_read_input_tokens": 2, "output_tokens": 3},
    }
    answer = MESSAGES.answer(message)
    assert answer.tool_calls[0]["function"] == {"name": "f", "arguments": "{}"}
    assert (answer.finish_reason, answer.usage.prompt_tokens, answer.response_id) == (
        "tool_calls",
        3,
        "msg_1",
    )
    assert MESSAGES.answer({"stop_reason": "end_turn"}).finish_reason == "stop"
    assert MESSAGES.answer({"stop_reason": "max_tokens"}).finish_reason == "length"
