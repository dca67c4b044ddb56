"""docs/extending.md's recipe for an API dialect, followed for a toy API: a module of readers and one
DIALECTS row, and nothing else, make the replay loop's reader and the reference reading (the
recorder's) read its stream alike."""

from __future__ import annotations

from types import SimpleNamespace

import orjson

from llmreplay.wire import chat_api
from llmreplay.wire.answer import Answer
from llmreplay.wire.channels import ANSWER, REASONING
from llmreplay.wire.dialects import _READERS, DIALECTS, _row, typed_dialect
from llmreplay.wire.response import summarize_stream
from llmreplay.wire.stream_event import NO_FACTS, EventFacts, event_type
from llmreplay.wire.usage import parse_usage
from replayer.loop.sse import SseStream

CHANNELS = {"toy.piece": ("piece", ANSWER), "toy.musing": ("musing", REASONING)}


def _channel(name, data):
    key, channel = CHANNELS.get(event_type(name, data), (None, None))
    return channel if key is not None and isinstance(data.get(key), str) and data[key] else None


def _facts(kind, data):
    if kind == "toy.begin":
        return EventFacts(response_id=data.get("id"))
    if kind == "toy.end":
        return EventFacts(usage=data.get("usage"), finish_reason=data.get("why"), done=True)
    return NO_FACTS


def _fold(kind, data, texts, thoughts, calls):
    key, channel = CHANNELS.get(kind, (None, None))
    if key is not None and isinstance(data.get(key), str):
        (texts if channel == ANSWER else thoughts).append(data[key])


REQUEST_READERS = [name for name in _READERS if name.startswith("request_")] + [
    "max_output_tokens",
    "server_state",
    "item_text",
    "echoed_answers",
]
TOY = SimpleNamespace(
    **{name: getattr(chat_api, name) for name in REQUEST_READERS},  # its requests read as chat's
    event_channel=_channel,
    response_id=lambda data: data.get("id"),
    answer=lambda data: Answer("", "", (), None, parse_usage(data.get("usage")), data.get("id")),
    END_EVENTS=("toy.end",),
    DELTA_RULES={name: (((key,), channel),) for name, (key, channel) in CHANNELS.items()},
    PARSED_EVENTS=("toy.begin",),
    owns_event=lambda kind: kind.startswith("toy."),
    event_facts=_facts,
    fold_text=_fold,
)
EVENTS = [
    {"type": "toy.begin", "id": "toy_1"},
    {"type": "toy.musing", "musing": "hm"},
    {"type": "toy.piece", "piece": "Hel"},
    {"type": "toy.ping"},
    {"type": "toy.piece", "piece": "lo"},
    {"type": "toy.end", "why": "stop", "usage": {"prompt_tokens": 4, "completion_tokens": 3}},
]


def test_a_toy_dialect_added_as_a_row_is_read_alike_by_both_sides(monkeypatch):
    monkeypatch.setitem(DIALECTS, "toy", _row("toy", TOY, typed_events=True))
    assert typed_dialect("toy.piece") is DIALECTS["toy"]
    payloads = [orjson.dumps(event) for event in EVENTS]
    sse = SseStream(0, "toy")
    for i, (event, payload) in enumerate(zip(EVENTS, payloads, strict=True)):
        sse.feed(f"event: {event['type']}\ndata: ".encode() + payload + b"\n\n", i)
    reference = summarize_stream(list(enumerate(payloads)))
    assert tuple(sse.chunk_offsets_ns) == reference.token_event_ns == (1, 2, 4)
    assert sse.reasoning_chunks == reference.reasoning_events == 1
    assert (reference.text, reference.reasoning_text) == ("Hello", "hm")
    assert (
        sse.usage == {"prompt_tokens": 4, "completion_tokens": 3}
        and parse_usage(sse.usage).completion_tokens == 3
    )
    assert (sse.done, sse.finish_reason, sse.response_id) == (
        True,
        "stop",
        "toy_1",
    ) and sse.missing_end() is None
    assert (reference.done_seen, reference.finish_reason, reference.response_id) == (True, "stop", "toy_1")
