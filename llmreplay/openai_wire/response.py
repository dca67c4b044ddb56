"""The reference reading of a response: which SSE events carried tokens (on which channel), the text
generated, tool calls, usage, finish reason. Pure; the recorder's converter and the replayer's
tokenizer fallback read with it, and the replayer's per-chunk parser is tested against it.
"""

from __future__ import annotations

from dataclasses import dataclass

import orjson

from llmreplay.openai_wire.channels import (
    ANSWER,
    REASONING,
    RESPONSES_DELTA_CHANNELS,
    RESPONSES_END_EVENTS,
    TEXT_CHANNELS,
    choice_delta,
    delta_channel,
)
from llmreplay.openai_wire.error_object import error_object_kind
from llmreplay.openai_wire.message_text import content_text
from llmreplay.openai_wire.usage import Usage, parse_usage

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
    finish_reason: str | None = None
    done_seen: bool = False  # `data: [DONE]` arrived
    stream_error: bool = False  # an error object inside the stream
    invalid_events: int = 0  # payloads that were not JSON


class _StreamState:
    __slots__ = ("stamps", "first_answer", "reasoning", "texts", "thoughts", "calls", "usage")
    __slots__ += ("finish", "done", "error", "invalid")

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
    )


def _usage_fields(usage: Usage) -> dict:
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "cached_tokens": usage.cached_tokens,
        "reasoning_tokens": usage.reasoning_tokens,
    }


def _apply_event(state: _StreamState, event: dict) -> str | None:
    """Fold one event into the state; the channel its generated tokens went to (None: none)."""
    choices = event.get("choices")
    usage = event.get("usage")
    if usage is not None and isinstance(usage, dict):
        state.usage = usage
    if not choices:
        kind = event.get("type")
        if isinstance(kind, str) and kind.startswith("response."):
            return _apply_responses_event(state, event, kind)
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
    for call in delta.get("tool_calls") or ():
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


def _apply_responses_event(state: _StreamState, event: dict, kind: str) -> str | None:
    channel = RESPONSES_DELTA_CHANNELS.get(kind)
    if channel is not None:
        text = event.get("delta") or ""
        if kind == "response.output_text.delta":
            state.texts.append(text)
        elif channel == REASONING:
            state.thoughts.append(text)
        return channel if text else None
    if kind in RESPONSES_END_EVENTS:
        response = event.get("response") if isinstance(event.get("response"), dict) else {}
        state.usage = response.get("usage") or state.usage
        state.finish = response.get("status")
        state.done = True
        state.error |= kind == "response.failed"
        for item in response.get("output") or ():
            if isinstance(item, dict) and item.get("type") == "function_call":
                state.calls[len(state.calls)] = item
    return None


def summarize_json(body: bytes, endpoint: str) -> ResponseShape:
    """Summarize a non-streamed JSON response body; ValueError when it is not JSON."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"response body is not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ValueError("response body is not a JSON object")
    text, reasoning, calls, finish = "", "", (), None
    if endpoint == "responses":
        text, calls, finish = _responses_output(data)
    else:
        choices = data.get("choices") or []
        first = choices[0] if choices and isinstance(choices[0], dict) else {}
        finish = first.get("finish_reason")
        message = first.get("message") if isinstance(first.get("message"), dict) else {}
        text = content_text(message.get("content")) if message else first.get("text") or ""
        reasoning = next((message[k] for k in _REASONING_TEXT_KEYS if isinstance(message.get(k), str)), "")
        calls = tuple(c for c in message.get("tool_calls") or () if isinstance(c, dict))
    return ResponseShape(
        text=text if isinstance(text, str) else "",
        reasoning_text=reasoning,
        tool_calls=calls,
        **_usage_fields(parse_usage(data.get("usage"))),
        finish_reason=finish if isinstance(finish, str) else None,
        done_seen=True,
        stream_error=error_object_kind(data) is not None,
    )


def _responses_output(data: dict) -> tuple[str, tuple[dict, ...], str | None]:
    texts, calls = [], []
    for item in data.get("output") or ():
        if not isinstance(item, dict):
            continue
        if item.get("type") == "function_call":
            calls.append(item)
        elif item.get("type") == "message":
            texts.append(content_text(item.get("content")))
    return "".join(texts), tuple(calls), data.get("status")


def counted_texts(response: ResponseShape) -> tuple[str, ...]:
    """The texts whose tokens are a response's completion tokens, each counted on its own: the
    reasoning, the answer, and each tool call's name and arguments (as message_text counts a call)."""
    return (response.reasoning_text, response.text, *(call_text(call) for call in response.tool_calls))


def call_text(call: dict) -> str:
    """A tool call's counted text: function name then arguments (a Responses item holds them itself)."""
    function = call.get("function") if isinstance(call.get("function"), dict) else call
    return f"{function.get('name') or ''}{function.get('arguments') or ''}"
