"""Response -> timing and token facts: which SSE events carried tokens, usage, finish reason, tool calls.

Pure functions over what the stream tap captured (event payloads with their arrival stamps, or a
whole JSON body). Runs in the converter process, never on the proxy's event loop.
"""

from __future__ import annotations

from dataclasses import dataclass

import orjson

from llmreplay.chat_text import content_text
from llmreplay.error_kinds import error_object_kind


@dataclass(frozen=True, slots=True)
class ResponseShape:
    token_event_ns: tuple[int, ...] = ()  # stamps of events carrying content, reasoning or tool-call deltas
    text: str = ""  # generated text of choice 0
    tool_calls: tuple[dict, ...] = ()
    prompt_tokens: int | None = None  # from the server's usage, when it sent one
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    finish_reason: str | None = None
    done_seen: bool = False  # `data: [DONE]` arrived
    stream_error: bool = False  # an error object inside the stream
    invalid_events: int = 0  # payloads that were not JSON


class _StreamState:
    __slots__ = ("stamps", "texts", "calls", "usage", "finish", "done", "error", "invalid")

    def __init__(self) -> None:
        self.stamps: list[int] = []
        self.texts: list[str] = []
        self.calls: dict[int, dict] = {}
        self.usage: dict | None = None
        self.finish: str | None = None
        self.done = False
        self.error = False
        self.invalid = 0


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
        if isinstance(event, dict) and _apply_event(state, event):
            state.stamps.append(stamp_ns)
    usage = _usage(state.usage)
    return ResponseShape(
        token_event_ns=tuple(state.stamps),
        text="".join(state.texts),
        tool_calls=tuple(state.calls[i] for i in sorted(state.calls)),
        prompt_tokens=usage[0],
        completion_tokens=usage[1],
        cached_tokens=usage[2],
        finish_reason=state.finish,
        done_seen=state.done,
        stream_error=state.error,
        invalid_events=state.invalid,
    )


def _apply_event(state: _StreamState, event: dict) -> bool:
    """Fold one event into the state; True when it carried generated tokens.

    Written for speed on the common chunk (one choice, a content delta): this runs once per token.
    """
    choices = event.get("choices")
    usage = event.get("usage")
    if usage is not None and isinstance(usage, dict):
        state.usage = usage
    if not choices:
        kind = event.get("type")
        if isinstance(kind, str) and kind.startswith("response."):
            return _apply_responses_event(state, event, kind)
        if "error" in event:
            state.error = True
        return False
    carried = False
    for choice in choices:
        if not isinstance(choice, dict):
            continue
        first = choice.get("index", 0) == 0
        if first and choice.get("finish_reason"):
            state.finish = choice["finish_reason"]
        delta = choice.get("delta")
        if delta is None:
            text = choice.get("text")  # completions endpoint
            if isinstance(text, str) and text:
                carried = True
                if first:
                    state.texts.append(text)
            continue
        content = delta.get("content")
        if content and isinstance(content, str):
            carried = True
            if first:
                state.texts.append(content)
        if len(delta) > (content is not None) + ("role" in delta):  # rarer fields: reasoning, tool calls
            carried |= _apply_other_delta(state, delta, first)
    return carried


def _apply_other_delta(state: _StreamState, delta: dict, first: bool) -> bool:
    carried = False
    for key in ("reasoning_content", "reasoning"):
        if isinstance(delta.get(key), str) and delta[key]:
            carried = True
    for call in delta.get("tool_calls") or ():
        if not isinstance(call, dict):
            continue
        carried = True
        if first:
            _merge_tool_call(state.calls, call)
    return carried


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


def _apply_responses_event(state: _StreamState, event: dict, kind: str) -> bool:
    """OpenAI Responses API streams typed events instead of chat deltas."""
    if kind in (
        "response.output_text.delta",
        "response.reasoning_text.delta",
        "response.function_call_arguments.delta",
    ):
        if kind == "response.output_text.delta":
            state.texts.append(event.get("delta") or "")
        return bool(event.get("delta"))
    if kind in ("response.completed", "response.incomplete", "response.failed"):
        response = event.get("response") if isinstance(event.get("response"), dict) else {}
        state.usage = response.get("usage") or state.usage
        state.finish = response.get("status")
        state.done = True
        state.error |= kind == "response.failed"
        for item in response.get("output") or ():
            if isinstance(item, dict) and item.get("type") == "function_call":
                state.calls[len(state.calls)] = item
    return False


def summarize_json(body: bytes, endpoint: str) -> ResponseShape:
    """Summarize a non-streamed JSON response body; ValueError when it is not JSON."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"response body is not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ValueError("response body is not a JSON object")
    usage = _usage(data.get("usage"))
    text, calls, finish = "", (), None
    if endpoint == "responses":
        text, calls, finish = _responses_output(data)
    else:
        choices = data.get("choices") or []
        first = choices[0] if choices and isinstance(choices[0], dict) else {}
        finish = first.get("finish_reason")
        message = first.get("message") if isinstance(first.get("message"), dict) else {}
        text = content_text(message.get("content")) if message else first.get("text") or ""
        calls = tuple(c for c in message.get("tool_calls") or () if isinstance(c, dict))
    return ResponseShape(
        text=text if isinstance(text, str) else "",
        tool_calls=calls,
        prompt_tokens=usage[0],
        completion_tokens=usage[1],
        cached_tokens=usage[2],
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


def _usage(usage) -> tuple[int | None, int | None, int | None]:
    """(prompt, completion, cached) from chat/completions or Responses usage objects."""
    if not isinstance(usage, dict):
        return None, None, None
    prompt = usage.get("prompt_tokens", usage.get("input_tokens"))
    completion = usage.get("completion_tokens", usage.get("output_tokens"))
    details = usage.get("prompt_tokens_details") or usage.get("input_tokens_details") or {}
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    return _count(prompt), _count(completion), _count(cached)


def _count(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None
