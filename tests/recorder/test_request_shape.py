"""Request and response shape extraction, error classification and session inference (pure, in-process)."""

from __future__ import annotations

import orjson
import pytest

from llmreplay.trace_format import REQUEST_COLUMNS
from llmreplay.wire import messages_api, responses_api
from llmreplay.wire.dialects import dialect_for
from llmreplay.wire.endpoints import endpoint_for_path
from llmreplay.wire.response import ResponseShape, summarize_json, summarize_stream
from recorder.capture import Capture
from recorder.record_builder import classify_error
from recorder.request_shape import ChatMessage, RequestShape, parse_request
from recorder.sessions import SessionLink, SessionTracker


def body(**fields) -> bytes:
    return orjson.dumps(fields)


def test_chat_request_shape():
    shape = parse_request(
        "chat_completions",
        body(
            model="m",
            stream=True,
            stream_options={"include_usage": True},
            max_completion_tokens=64,
            temperature=0.5,
            top_p=1,
            n=2,
            stop=["x"],
            seed=7,
            user="alice",
            tools=[{"type": "function", "function": {"name": "f", "parameters": {}}}],
            tool_choice={"type": "function", "function": {"name": "f"}},
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "s", "schema": {"type": "object"}},
            },
            messages=[
                {"role": "system", "content": "be brief"},
                {
                    "role": "user",
                    "content": [{"type": "text", "text": "hi"}, {"type": "image_url", "image_url": {}}],
                },
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [{"function": {"name": "f", "arguments": "{}"}}],
                },
            ],
        ),
    )
    columns = shape.columns
    assert set(columns) <= set(REQUEST_COLUMNS) and shape.include_usage
    assert [columns[name] for name in ("model", "stream", "max_tokens")] == ["m", True, 64]
    assert [columns[name] for name in ("temperature", "top_p", "n", "stop_present", "seed")] == [0.5, 1.0, 2, True, 7]
    assert [columns[name] for name in ("tools_count", "tool_choice", "structured_output")] == [1, "function", "json_schema"]
    assert shape.schema_json == '{"type":"object"}'
    assert shape.messages == (
        ChatMessage("system", "be brief"),
        ChatMessage("user", "hi"),
        ChatMessage("assistant", "f{}"),
    )
    assert shape.user == "alice"


def test_completions_prompt_as_token_ids_and_text():
    assert parse_request("completions", body(prompt=[1, 2, 3])).prompt_token_ids == (1, 2, 3)
    assert parse_request("completions", body(prompt="hello")).prompt_text == "hello"
    assert parse_request("embeddings", body(input=["a", "b"])).prompt_text == "a\nb"


def test_malformed_bodies_raise_value_error():
    for raw in (b"{not json", b"[1, 2]", b""):
        with pytest.raises(ValueError):
            parse_request("chat_completions", raw)


def test_endpoint_for_path():
    assert endpoint_for_path("/v1/chat/completions?x=1") == "chat_completions"
    assert endpoint_for_path("/openai/v1/completions") == "completions"
    assert endpoint_for_path("/v1/responses") == "responses"
    assert endpoint_for_path("/v1/messages") == "messages"  # Anthropic


def sse(*chunks) -> list[tuple[int, bytes]]:
    return [(10 * (i + 1), orjson.dumps(c) if not isinstance(c, bytes) else c) for i, c in enumerate(chunks)]


def test_stream_summary_ttft_skips_role_chunk_and_counts_tool_deltas():
    events = sse(
        {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]},
        {"choices": [{"index": 0, "delta": {"content": "Hel"}}]},
        {
            "choices": [
                {
                    "index": 0,
                    "delta": {
                        "tool_calls": [
                            {"index": 0, "id": "c1", "function": {"name": "f", "arguments": '{"a'}}
                        ]
                    },
                }
            ]
        },
        {
            "choices": [
                {"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": '":1}'}}]}}
            ]
        },
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
        {
            "choices": [],
            "usage": {
                "prompt_tokens": 5,
                "completion_tokens": 9,
                "prompt_tokens_details": {"cached_tokens": 2},
            },
        },
        b"[DONE]",
    )
    summary = summarize_stream(events)
    assert summary.token_event_ns == (20, 30, 40)
    assert summary.text == "Hel"
    assert summary.tool_calls[0]["function"] == {"name": "f", "arguments": '{"a":1}'}
    assert (summary.prompt_tokens, summary.completion_tokens, summary.cached_tokens) == (5, 9, 2)
    assert (summary.finish_reason, summary.done_seen, summary.stream_error) == ("tool_calls", True, False)


def test_stream_error_object_and_invalid_payloads():
    summary = summarize_stream(sse({"error": {"message": "boom"}}, b"{oops"))
    assert summary.stream_error and summary.invalid_events == 1


def test_json_response_summary():
    raw = body(
        choices=[
            {
                "message": {"content": "hi", "tool_calls": [{"function": {"name": "g"}}]},
                "finish_reason": "stop",
            }
        ],
        usage={"prompt_tokens": 3, "completion_tokens": 1},
    )
    summary = summarize_json(raw, "chat_completions")
    assert (summary.text, len(summary.tool_calls), summary.finish_reason) == ("hi", 1, "stop")
    assert (summary.prompt_tokens, summary.completion_tokens) == (3, 1)


def capture(**state) -> Capture:
    cap = Capture("r", "chat_completions", 0, 0, 1024)
    cap.request_body = b"{}"  # the request hook ran: the client sent its whole body
    for key, value in state.items():
        setattr(cap, key, value)
    return cap


def test_error_classification():
    shape, ok = RequestShape(), summarize_stream([])
    assert classify_error(capture(outcome="shutdown"), shape, None) == "shutdown"
    half_sent = capture(outcome="error", error_msg="HTTP/1 protocol error: peer closed connection", request_body=None)
    assert classify_error(half_sent, shape, None) == "client_disconnected"
    assert (
        classify_error(capture(outcome="error", error_msg="Client disconnected.", status=200), shape, None)
        == "client_disconnected"
    )
    assert (
        classify_error(capture(outcome="error", error_msg="stream reset by client (CANCEL)"), shape, None)
        == "client_disconnected"
    )
    assert (
        classify_error(capture(outcome="error", error_msg="Connection refused"), shape, None)
        == "connect_error"
    )
    assert (
        classify_error(
            capture(outcome="error", error_msg="server closed connection", server_connected=True), shape, None
        )
        == "connection_reset"
    )
    assert classify_error(capture(outcome="response", status=429), shape, None) == "rate_limited_429"
    assert classify_error(capture(outcome="response", status=404), shape, None) == "http_4xx"
    assert classify_error(capture(outcome="response", status=503), shape, None) == "http_5xx"
    complete = summarize_stream([(1, b"[DONE]")])
    hung_up_after_done = capture(
        outcome="error", error_msg="Client disconnected.", status=200, content_type="text/event-stream"
    )
    assert classify_error(hung_up_after_done, shape, complete) is None  # SDKs close right after [DONE]
    truncated = capture(outcome="response", status=200, content_type="text/event-stream")
    assert classify_error(truncated, shape, ok) == "stream_truncated"


def test_sessions_follow_messages_plus_answer():
    tracker = SessionTracker(max_sessions=10)
    q1, a1 = ChatMessage("user", "q1"), ChatMessage("assistant", "a1")
    first = tracker.link_chat("r1", (q1,), ((a1,),), arrival_ns=0, end_ns=100)
    assert (first.session_id, first.turn_index, first.parent_request_id) == ("r1", 0, None)
    second = tracker.link_chat(
        "r2", (q1, a1, ChatMessage("user", "q2")), ((ChatMessage("assistant", "a2"),),), 150, 300
    )
    assert (second.session_id, second.turn_index, second.parent_request_id, second.think_time_ns) == (
        "r1",
        1,
        "r1",
        50,
    )
    third = tracker.link_chat(
        "r3",
        (q1, a1, ChatMessage("user", "q2"), ChatMessage("assistant", "a2"), ChatMessage("user", "q3")),
        (),
        400,
        500,
    )
    assert (third.session_id, third.turn_index, third.parent_request_id) == ("r1", 2, "r2")
    other = tracker.link_chat(
        "r4", (q1, ChatMessage("assistant", "a different answer"), ChatMessage("user", "q2")), (), 0, 1
    )
    assert (other.session_id, other.turn_index) == ("r4", 0)


def test_sessions_memory_is_bounded():
    tracker = SessionTracker(max_sessions=3)
    for i in range(10):
        tracker.link_chat(f"r{i}", (ChatMessage("user", f"q{i}"),), ((ChatMessage("assistant", "a"),),), 0, 1)
    assert len(tracker) == 3
    evicted = tracker.link_chat(
        "x", (ChatMessage("user", "q0"), ChatMessage("assistant", "a"), ChatMessage("user", "n")), (), 2, 3
    )
    assert evicted.turn_index == 0  # the oldest conversation was forgotten: documented limit
    kept = tracker.link_chat(
        "y", (ChatMessage("user", "q9"), ChatMessage("assistant", "a"), ChatMessage("user", "n")), (), 2, 3
    )
    assert (kept.session_id, kept.turn_index) == ("r9", 1)


def test_explicit_sessions_count_turns():
    tracker = SessionTracker(max_sessions=10)
    assert tracker.link_explicit("s", "r1", 0, 10).turn_index == 0
    link = tracker.link_explicit("s", "r2", 25, 40)
    assert (link.turn_index, link.parent_request_id, link.think_time_ns) == (1, "r1", 15)


def test_an_answer_echoed_back_is_found_in_each_apis_next_request():
    call = {"id": "c1", "type": "function", "function": {"name": "find", "arguments": '{"q": "x", "n": 1}'}}
    answer = ResponseShape(text="Looking.", reasoning_text="think", tool_calls=(call,))
    items = [
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "think"}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Looking."}]},
        {"type": "function_call", "call_id": "c1", "name": "find", "arguments": '{"q": "x", "n": 1}'},
    ]
    echoed = responses_api.request_messages({"input": items})
    assert set(dialect_for("responses").echoed_answers(answer)) == {echoed, echoed[1:]}  # with or without reasoning
    blocks = [
        {"type": "thinking", "thinking": "think", "signature": "sig"},
        {"type": "text", "text": "Looking."},
        {"type": "tool_use", "id": "c1", "name": "find", "input": {"q": "x", "n": 1}},
    ]
    with_thinking = messages_api.request_messages({"messages": [{"role": "assistant", "content": blocks}]})
    without = messages_api.request_messages({"messages": [{"role": "assistant", "content": blocks[1:]}]})
    assert set(dialect_for("messages").echoed_answers(answer)) == {with_thinking, without}


def test_a_chained_request_continues_the_turn_that_answered_with_its_id():
    tracker = SessionTracker(max_sessions=10)
    first = tracker.link_chat("r1", (ChatMessage("user", "q"),), (), 0, 100)
    tracker.remember_response("key-a", first, "r1", 100)
    second = tracker.link_chained("r2", "key-a", 130)
    assert (second.session_id, second.turn_index, second.parent_request_id, second.think_time_ns) == (
        "r1", 1, "r1", 30,
    )  # fmt: skip
    tracker.remember_response("key-b", second, "r2", 200)
    assert tracker.link_chained("r3", "key-b", 250).turn_index == 2
    assert tracker.link_chained("r4", "never-seen", 300) == SessionLink("r4")  # a new session
