"""The reference reading of a response: which SSE events carried tokens (on which channel), the text
generated, tool calls, usage, finish reason. Pure; the recorder's converter and the replayer's
tokenizer fallback read with it, and the replayer's per-chunk parser is tested against it.
"""

from __future__ import annotations

from dataclasses import dataclass

import orjson

from llmreplay.wire.channels import ANSWER, REASONING, TEXT_CHANNELS, choice_delta, delta_channel
from llmreplay.wire.dialects import dialect_for, typed_dialect
from llmreplay.wire.error_object import error_object_kind
from llmreplay.wire.json_array import array_items
from llmreplay.wire.message_text import call_text
from llmreplay.wire.usage import Usage, merge_usage, parse_usage

_ANSWER_TEXT_KEYS = tuple(key for key, channel in TEXT_CHANNELS.items() if channel == ANSWER)
_REASONING_TEXT_KEYS = tuple(key for key, channel in TEXT_CHANNELS.items() if channel == REASONING)


@dataclass(frozen=True, slots=True)
class ResponseShape:
    token_event_ns: tuple[int, ...] = ()  # stamps of events carrying generated tokens, reasoning included
    first_answer_index: int | None = None  # in token_event_ns: the first content, refusal or tool-call event
    reasoning_events: int = 0  # events carrying reasoning tokens only
    text: str = ""  # answer text of choice 0
    reasoning_text: str = ""  # reasoning text of choice 0
    tool_calls: tuple[dict, ...] = ()
    prompt_tokens: int | None = None  # from the server's usage, when it sent one
    completion_tokens: int | None = None  # reasoning and answer tokens
    cached_tokens: int | None = None
    reasoning_tokens: int | None = None  # as the usage reported them
    cache_write_tokens: int | None = None
    response_id: str | None = None  # Responses: response.id; Messages: message.id; else the body's id
    finish_reason: str | None = None
    done_seen: bool = False  # `data: [DONE]` arrived
    stream_error: bool = False  # an error object inside the stream
    invalid_events: int = 0  # payloads that were not JSON


class _StreamState:
    __slots__ = ("stamps", "first_answer", "reasoning", "texts", "thoughts", "calls", "usage")
    __slots__ += ("finish", "done", "error", "invalid", "response_id")

    def __init__(self) -> None:
        self.stamps: list[int] = []
        self.first_answer: int | None = None
        self.reasoning = 0
        self.texts: list[str] = []
        self.thoughts: list[str] = []
        self.calls: dict[int, dict] = {}
        self.usage: dict | None = None
        self.finish: str | None = None
        self.done = False
        self.error = False
        self.invalid = 0
        self.response_id: str | None = None

    def stamp(self, stamp_ns: int, channel: str) -> None:
        if channel == ANSWER:
            if self.first_answer is None:
                self.first_answer = len(self.stamps)
        else:
            self.reasoning += 1
        self.stamps.append(stamp_ns)


def summarize_stream(events: list[tuple[int, bytes]]) -> ResponseShape:
    """Summarize an SSE response from (arrival_ns, data payload) pairs, in arrival order."""
    state = _StreamState()
    for stamp_ns, payload in events:
        if payload.strip() == b"[DONE]":
            state.done = True
            continue
        try:
            event = orjson.loads(payload)
        except orjson.JSONDecodeError:
            state.invalid += 1
            continue
        if isinstance(event, dict):
            channel = _apply_event(state, event)
            if channel is not None:
                state.stamp(stamp_ns, channel)
    usage = parse_usage(state.usage)
    return ResponseShape(
        token_event_ns=tuple(state.stamps),
        first_answer_index=state.first_answer,
        reasoning_events=state.reasoning,
        text="".join(state.texts),
        reasoning_text="".join(state.thoughts),
        tool_calls=tuple(state.calls[i] for i in sorted(state.calls)),
        **_usage_fields(usage),
        finish_reason=state.finish,
        done_seen=state.done,
        stream_error=state.error,
        invalid_events=state.invalid,
        response_id=state.response_id,
    )


def _usage_fields(usage: Usage) -> dict:
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "cached_tokens": usage.cached_tokens,
        "reasoning_tokens": usage.reasoning_tokens,
        "cache_write_tokens": usage.cache_write_tokens,
    }


def _apply_event(state: _StreamState, event: dict) -> str | None:
    """Fold one event into the state; the channel its generated tokens went to (None: none)."""
    choices = array_items(event.get("choices"))
    kind = event.get("type")
    dialect = typed_dialect(kind) if isinstance(kind, str) and not choices else None
    if dialect is not None:
        return _apply_typed_event(state, event, kind, dialect)
    usage = event.get("usage")
    if usage is not None and isinstance(usage, dict):
        state.usage = usage
    if not choices:
        state.error |= error_object_kind(event) is not None
        return None
    found = None
    for choice in choices:
        if not isinstance(choice, dict):
            continue
        first = choice.get("index", 0) == 0
        if first and choice.get("finish_reason"):
            state.finish = choice["finish_reason"]
        delta = choice_delta(choice)
        channel = delta_channel(delta)
        if channel is None:
            continue
        found = ANSWER if channel == ANSWER else found or channel
        if first:
            _keep_text(state, delta)
    return found


def _keep_text(state: _StreamState, delta: dict) -> None:
    """Choice 0's generated text, by channel, and its tool calls merged from their deltas."""
    for key in _ANSWER_TEXT_KEYS:
        if isinstance(delta.get(key), str):
            state.texts.append(delta[key])
    for key in _REASONING_TEXT_KEYS:
        if isinstance(delta.get(key), str):
            state.thoughts.append(delta[key])
    for call in array_items(delta.get("tool_calls")):
        if isinstance(call, dict):
            _merge_tool_call(state.calls, call)


def _merge_tool_call(calls: dict[int, dict], delta: dict) -> None:
    index = delta.get("index", len(calls))
    call = calls.setdefault(
        index, {"id": None, "type": "function", "function": {"name": "", "arguments": ""}}
    )
    if delta.get("id"):
        call["id"] = delta["id"]
    function = delta.get("function")
    if isinstance(function, dict):
        call["function"]["name"] += function.get("name") or ""
        call["function"]["arguments"] += function.get("arguments") or ""


def _apply_typed_event(state: _StreamState, event: dict, kind: str, dialect) -> str | None:
    """A Responses or Messages event: its facts (llmreplay.wire.stream_event), its texts."""
    facts = dialect.event_facts(kind, event)
    if facts.usage is not None:
        state.usage = merge_usage(state.usage, facts.usage)
    state.finish = facts.finish_reason or state.finish
    state.done |= facts.done
    state.error |= facts.failed is not None
    state.response_id = facts.response_id or state.response_id
    dialect.fold_text(kind, event, state.texts, state.thoughts, state.calls)
    return dialect.event_channel(kind, event)


def summarize_json(body: bytes, endpoint: str) -> ResponseShape:
    """Summarize a non-streamed JSON response body; ValueError when it is not JSON."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"response body is not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ValueError("response body is not a JSON object")
    answer = dialect_for(endpoint).answer(data)
    return ResponseShape(
        text=answer.text,
        reasoning_text=answer.reasoning_text,
        tool_calls=answer.tool_calls,
        **_usage_fields(answer.usage),
        finish_reason=answer.finish_reason,
        done_seen=True,
        stream_error=error_object_kind(data) is not None or data.get("type") == "error",
        response_id=answer.response_id,
    )


def counted_texts(response: ResponseShape) -> tuple[str, ...]:
    """The texts whose tokens are a response's completion tokens, each counted on its own: the
    reasoning, the answer, and each tool call's name and arguments (as message_text counts a call)."""
    return (response.reasoning_text, response.text, *(call_text(call) for call in response.tool_calls))
