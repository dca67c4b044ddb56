"""The SSE reader: content detection without JSON, parsed tails, and any split of the bytes."""

from __future__ import annotations

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from replayer.loop.sse import SseStream


def chunk(content=None, finish=None, tool=None, usage=None, role=None, sep=b"\n\n") -> bytes:
    delta = {}
    if role:
        delta["role"] = role
    if content is not None:
        delta["content"] = content
    if tool is not None:
        delta["tool_calls"] = [{"index": tool, "id": f"c{tool}", "function": {"name": "f", "arguments": ""}}]
    obj = {"id": "x", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    if usage is not None:
        obj = {"id": "x", "choices": [], "usage": usage}
    return b"data: " + orjson.dumps(obj) + sep


STREAM = (
    chunk(role="assistant", content="")
    + b": keep-alive\n\n"
    + chunk(content="Hel")
    + chunk(content='lo "error" \\n')
    + chunk(content="!", finish="stop")
    + chunk(usage={"prompt_tokens": 5, "completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": 2}})
    + b"data: [DONE]\n\n"
)


def feed_all(parts, start=0):
    sse = SseStream(start)
    for i, part in enumerate(parts):
        sse.feed(part, 1000 * (i + 1))
    sse.finish()
    return sse


def test_role_only_and_empty_chunks_are_not_content():
    sse = feed_all([STREAM])
    assert sse.content_chunks == 3
    assert sse.finish_reason == "stop" and sse.done
    assert sse.usage["completion_tokens"] == 3
    assert sse.error is None and sse.invalid is None


def test_chunk_is_timestamped_by_the_read_that_completed_it():
    first = chunk(content="a")
    sse = feed_all([first[:10], first[10:], chunk(content="b")])
    assert list(sse.chunk_offsets_ns) == [2000, 3000]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=12), st.booleans())
def test_any_split_gives_the_same_events(cuts, crlf):
    data = STREAM.replace(b"\n", b"\r\n") if crlf else STREAM
    points = sorted(set(cuts))
    parts = [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True) if b > a]
    sse = feed_all(parts)
    assert sse.content_chunks == 3
    assert sse.finish_reason == "stop" and sse.done and sse.usage is not None
    assert sse.invalid is None and sse.error is None


def test_tool_call_deltas_count_as_content_and_calls_are_counted():
    sse = feed_all(
        [chunk(tool=0) + chunk(tool=0) + chunk(tool=1) + chunk(finish="tool_calls") + b"data: [DONE]\n\n"]
    )
    assert sse.content_chunks == 3 and len(sse.tool_call_ids) == 2 and sse.finish_reason == "tool_calls"


def test_error_object_and_error_event_are_stream_errors():
    assert feed_all([b'data: {"error": {"message": "boom"}}\n\n']).error == "boom"
    assert feed_all([b'event: error\ndata: {"message": "x"}\n\n']).error is not None


def test_non_json_data_is_invalid_and_missing_done_is_visible():
    assert feed_all([b"data: hello\n\n"]).invalid is not None
    sse = feed_all([chunk(content="a", finish="stop")])
    assert not sse.done and sse.finish_reason == "stop"


def test_completions_text_and_spaced_json_are_content():
    sse = feed_all([b'data: {"choices": [{"index": 0, "text": "hi", "finish_reason": null}]}\n\n'])
    assert sse.content_chunks == 1


def sglang_chunk(content, finish=None) -> bytes:
    """SGLang's shape: nulls for every field it does not use, in every chunk."""
    delta = {"role": None, "content": content, "reasoning_content": None, "tool_calls": None}
    choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish, "matched_stop": None}
    obj = {"id": "s", "object": "chat.completion.chunk", "choices": [choice], "usage": None}
    return b"data: " + orjson.dumps(obj) + b"\n\n"


# Text chunks in one framing, and the cases that must not pass as one plain chunk of it: a quote or
# a trailing backslash in the text, two chunks in one read, text with a finish reason.
FRAMED = [
    chunk(role="assistant", content=""),
    chunk(content="a"),
    chunk(content="b c"),
    chunk(content='say "hi"'),
    chunk(content="back\\"),
    chunk(content="x") + chunk(content="y"),
    chunk(content="z", finish="length"),
    chunk(usage={"prompt_tokens": 5, "completion_tokens": 7}),
    b"data: [DONE]\n\n",
]


def test_learned_framing_counts_every_text_chunk_and_parses_the_rest():
    sse = feed_all(FRAMED)
    assert list(sse.chunk_offsets_ns) == [2000, 3000, 4000, 5000, 6000, 6000, 7000]
    assert sse.finish_reason == "length" and sse.usage["completion_tokens"] == 7 and sse.done
    assert sse.invalid is None and sse.error is None and sse.events == 10


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=len(b"".join(FRAMED))), max_size=12))
def test_learned_framing_survives_any_split(cuts):
    data = b"".join(FRAMED)
    points = sorted(set(cuts))
    parts = [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True) if b > a]
    sse = feed_all(parts)
    assert sse.content_chunks == 7 and sse.finish_reason == "length" and sse.usage is not None and sse.done


def test_null_fields_are_not_parsed_and_do_not_count_as_calls():
    from replayer.loop.sse import _NEEDS_PARSE

    assert _NEEDS_PARSE.search(sglang_chunk("a")) is None
    sse = feed_all([sglang_chunk(""), sglang_chunk("a"), sglang_chunk("b"), sglang_chunk("", finish="stop")])
    assert sse.content_chunks == 2 and not sse.tool_call_ids and sse.finish_reason == "stop"
    assert sse.usage is None
