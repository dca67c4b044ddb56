"""The forms in which a client sends an answer back in its next request, per API: what session
inference looks for after a turn's messages, counted by the dialects' rules (llmreplay.wire)."""

from __future__ import annotations

import orjson

from llmreplay.wire.messages_api import tool_input_json
from llmreplay.wire.response import ResponseShape, call_text
from recorder.request_shape import ChatMessage

Echo = tuple[ChatMessage, ...]  # the assistant messages an answer becomes in the next request


def echoed_answers(endpoint: str, response: ResponseShape) -> tuple[Echo, ...]:
    """Every form the answer may come back in (with or without its reasoning, where clients differ)."""
    if endpoint == "responses":  # output items: reasoning, the message, each function_call
        items = (response.text, *(call_text(call) for call in response.tool_calls))
        forms = [tuple(ChatMessage("assistant", text) for text in items if text)]
        if response.reasoning_text:
            forms.append((ChatMessage("assistant", response.reasoning_text), *forms[0]))
        return tuple(forms)
    if endpoint == "messages":  # one assistant message: [thinking], text, tool_use blocks
        uses = tuple(_tool_use_text(call) for call in response.tool_calls)
        plain = "\n".join(text for text in (response.text, *uses) if text)
        forms = [(ChatMessage("assistant", plain),)]
        if response.reasoning_text:
            thought = "\n".join(text for text in (response.reasoning_text, response.text, *uses) if text)
            forms.append((ChatMessage("assistant", thought),))
        return tuple(forms)
    text = response.text + "".join(call_text(call) for call in response.tool_calls)
    return ((ChatMessage("assistant", text),),)


def _tool_use_text(call: dict) -> str:
    """A tool_use block as the next request counts it: the name, then its input as compact JSON."""
    function = call.get("function") or {}
    try:
        arguments = orjson.loads(function.get("arguments") or "null")
    except orjson.JSONDecodeError:
        arguments = None
    return f"{function.get('name') or ''}{tool_input_json(arguments)}"
