"""The OpenAI Responses API (/v1/responses): its request fields, stream events and answer body, read
into the shapes every dialect shares, and how a replayed body lays them out (BODY). Pure, light imports:
the recorder's proxy and the replay loop use it.
"""

from __future__ import annotations

from collections.abc import Sequence

from llmreplay.wire.answer import Answer
from llmreplay.wire.api_body import ANSWER_SCHEMA, ApiBody, forced_choice
from llmreplay.wire.channels import (
    REASONING,
    RESPONSES_DELTA_CHANNELS,
    RESPONSES_END_EVENTS,
    RESPONSES_ITEM_CHANNELS,
)
from llmreplay.wire.chat_api import chat_view
from llmreplay.wire.error_object import error_text
from llmreplay.wire.json_array import array_items
from llmreplay.wire.message_text import PromptMessage, call_text, content_text, text_parts
from llmreplay.wire.stream_event import NO_FACTS, EventFacts, event_type
from llmreplay.wire.usage import parse_usage

# The replayer sends this as `previous_response_id` in a chained turn; the replay loop puts in its
# place the id staging returned for the session's previous turn (replayer/loop/chain.py).
PREVIOUS_RESPONSE_PLACEHOLDER = "llmreplay-previous-response"

ANSWER_TEXT_EVENTS = ("response.output_text.delta", "response.refusal.delta")  # answer text, not a call's
END_EVENTS = RESPONSES_END_EVENTS
ITEM_ADDED = "response.output_item.added"
ID_EVENTS = ("response.created", *END_EVENTS)  # carry `response.id`
FAILED_EVENTS = ("response.failed", "error")
# The stream's byte rules (replayer/loop/sse.py): each delta event's tokens are a non-empty `delta`
# string, on its channel; the events read whole besides the end events and `error` (event_facts).
DELTA_RULES = {name: ((("delta",), channel),) for name, channel in RESPONSES_DELTA_CHANNELS.items()}
PARSED_EVENTS = ("response.created", ITEM_ADDED)
# `incomplete_details.reason` -> the chat finish reason
INCOMPLETE_REASONS = {"max_output_tokens": "length", "content_filter": "content_filter"}
_CALL_ITEMS = ("function_call", "custom_tool_call")
_ITEM_TYPES = ("message", "reasoning", *_CALL_ITEMS, "function_call_output", "custom_tool_call_output")


def request_messages(body: dict) -> tuple[PromptMessage, ...]:
    """`instructions` first (instructions_item), then every text-bearing input item in order (a string
    input is one user message); images and item references count nothing."""
    messages = []
    if body.get("instructions") is not None:
        messages.append(item_message(instructions_item(body["instructions"])))
    items = body.get("input")
    if isinstance(items, str):
        return (*messages, PromptMessage("user", items))
    for item in items if isinstance(items, list) else ():
        message = item_message(item)
        if message is not None:
            messages.append(message)
    return tuple(messages)


def instructions_item(instructions) -> dict:
    """`instructions` (a string, or an array of input items) as the system message item the prompt
    starts with; the anonymizer rewrites it as this item too (anonymizer/dialect_items.py)."""
    return {"role": "system", "content": instructions}


def item_message(item, items_inside: bool = True) -> PromptMessage | None:
    """An input or output item as a prompt message; None for one that holds no text (item_reference).
    A message whose content holds input items (instructions_item) counts their texts too."""
    if not isinstance(item, dict):
        return None
    kind = item.get("type")
    if kind in _CALL_ITEMS:
        arguments = item.get("arguments") if kind == "function_call" else item.get("input")
        return PromptMessage("assistant", f"{item.get('name') or ''}{arguments or ''}")
    if kind in ("function_call_output", "custom_tool_call_output"):
        output = item.get("output")
        return PromptMessage("tool", output if isinstance(output, str) else content_text(output))
    if kind == "reasoning":
        parts = [content_text(item.get("summary")), content_text(item.get("content"))]
        return PromptMessage("assistant", "\n".join(part for part in parts if part))
    if kind not in (None, "message"):
        return None
    role = item.get("role") if isinstance(item.get("role"), str) else "user"
    return PromptMessage(role, _content_text(item.get("content"), items_inside))


def _content_text(content, items_inside: bool) -> str:
    """A message's content: a string, or its text parts joined by newlines, and when `items_inside`
    (one level: an `instructions` array of input items) the text of each input item in it."""
    if not items_inside or not isinstance(content, list):
        return content_text(content)
    texts = []
    for part in content:
        nested = item_message(part, False) if _is_item(part) else None
        texts += [nested.text] if nested is not None else text_parts([part])
    return "\n".join(texts)


def _is_item(part) -> bool:
    """An input item rather than a content part: it has a role, or an item's type (not a part's text)."""
    return (
        isinstance(part, dict)
        and not isinstance(part.get("text"), str)
        and ("role" in part or part.get("type") in _ITEM_TYPES)
    )


def request_tools(body: dict) -> tuple[dict, ...]:
    """Tool definitions as chat's {name, description, parameters}; a built-in tool is named by its type."""
    tools = body.get("tools")
    return tuple(
        {
            "name": tool.get("name") or tool.get("type"),
            "description": tool.get("description"),
            "parameters": tool.get("parameters"),
        }
        for tool in (tools if isinstance(tools, list) else ())
        if isinstance(tool, dict)
    )


def request_tool_choice(body: dict) -> str | None:
    """auto | none | required | function (a named tool forced); allowed_tools keeps its mode."""
    choice = body.get("tool_choice")
    if isinstance(choice, str):
        return choice if choice in ("auto", "none", "required") else None
    if not isinstance(choice, dict):
        return None
    if choice.get("type") == "allowed_tools":
        mode = choice.get("mode")
        return mode if mode in ("auto", "required") else None
    return "function"


def request_format(body: dict) -> object:
    """`text.format`, as sent (content_response_format holds it)."""
    text = body.get("text")
    return text.get("format") if isinstance(text, dict) else None


def item_text(item) -> tuple[str, str]:
    """One `input` item's (role, counted text), as the anonymizer rewrites it; ("unknown", "") for
    what is no message."""
    found = item_message(item)
    return ("unknown", "") if found is None else (found.role, found.text)


def echoed_answers(response) -> tuple[tuple[PromptMessage, ...], ...]:
    """The forms a ResponseShape comes back in the next request: output items (reasoning, the
    message, each function_call), with or without the reasoning, where clients differ."""
    items = (response.text, *(call_text(call) for call in response.tool_calls))
    forms = [tuple(PromptMessage("assistant", text) for text in items if text)]
    if response.reasoning_text:
        forms.append((PromptMessage("assistant", response.reasoning_text), *forms[0]))
    return tuple(forms)


def request_structured(body: dict) -> tuple[str, dict | None]:
    """(none | json_object | json_schema, the schema) from `text.format`."""
    text = body.get("text")
    fmt = text.get("format") if isinstance(text, dict) else None
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind == "json_schema":
        schema = fmt.get("schema")
        return "json_schema", schema if isinstance(schema, dict) else None
    return ("json_object", None) if kind == "json_object" else ("none", None)


def max_output_tokens(body: dict) -> int | None:
    value = body.get("max_output_tokens")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def server_state(body: dict) -> tuple[str | None, str | None]:
    """Which stored state the request continues and the id it names: ("previous_response_id", id),
    ("conversation", id) or (None, None)."""
    previous = body.get("previous_response_id")
    if isinstance(previous, str) and previous:
        return "previous_response_id", previous
    conversation = body.get("conversation")
    if isinstance(conversation, dict):
        conversation = conversation.get("id")
    if isinstance(conversation, str) and conversation:
        return "conversation", conversation
    return None, None


def event_channel(event_name: str | None, data: dict) -> str | None:
    """The channel a stream event's generated tokens go to (llmreplay.wire.channels); None: none."""
    kind = event_type(event_name, data)
    channel = RESPONSES_DELTA_CHANNELS.get(kind)
    if channel is not None:
        delta = data.get("delta")
        return channel if isinstance(delta, str) and delta else None
    item = data.get("item")
    if kind == ITEM_ADDED and isinstance(item, dict):
        kind = item.get("type") if isinstance(item.get("type"), str) else None
        key, channel = RESPONSES_ITEM_CHANNELS.get(kind, (None, None))
        return channel if key is not None and _nonempty(item.get(key)) else None
    return None


def _nonempty(value) -> bool:
    return isinstance(value, str) and value != ""


def response_id(data: dict) -> str | None:
    """The response's id: a whole body's `id`, or `response.id` of response.created / the end events."""
    response = data.get("response")
    if isinstance(response, dict):
        data = response
    value = data.get("id")
    return value if isinstance(value, str) and value else None


def finish_reason(response: dict) -> str | None:
    """A response object's end as chat's finish reason: stop, tool_calls, length, content_filter;
    None for a failed (or unfinished) response."""
    status = response.get("status")
    if status == "completed":
        calls = any(_is_call(item) for item in array_items(response.get("output")))
        return "tool_calls" if calls else "stop"
    if status == "incomplete":
        details = response.get("incomplete_details")
        reason = details.get("reason") if isinstance(details, dict) else None
        if not isinstance(reason, str):  # none given (or not a name): the usual reason, the length
            return "length"
        return INCOMPLETE_REASONS.get(reason, reason)
    return None


def output_texts(response: dict) -> tuple[str, str, tuple[dict, ...]]:
    """(answer text, reasoning text, tool calls in chat's shape) of a response object's `output`."""
    texts, thoughts, calls = [], [], []
    for item in array_items(response.get("output")):
        if not isinstance(item, dict):
            continue
        kind = item.get("type")
        if kind == "message":
            texts.append(content_text(item.get("content")))
        elif kind == "reasoning":
            thoughts.append(content_text(item.get("content")) or content_text(item.get("summary")))
        elif _is_call(item):
            calls.append(chat_call(item))
    return "".join(texts), "".join(thoughts), tuple(calls)


def chat_call(item: dict) -> dict:
    """A function_call item in chat's tool-call shape."""
    return {
        "id": item.get("call_id") or item.get("id"),
        "type": "function",
        "function": {"name": item.get("name") or "", "arguments": item.get("arguments") or ""},
    }


def _is_call(item) -> bool:
    return isinstance(item, dict) and item.get("type") == "function_call"


def answer(data: dict) -> Answer:
    """A whole response object (a non-streamed body, or the `response` of an end event)."""
    text, reasoning, calls = output_texts(data)
    return Answer(
        text, reasoning, calls, finish_reason(data), parse_usage(data.get("usage")), response_id(data)
    )


def event_facts(kind: str, data: dict) -> EventFacts:
    """response.created (id), output_item.added (a call), the end events (usage, finish), error."""
    if kind == "error":
        return EventFacts(failed=error_text(data.get("message") or data.get("code") or data))
    item = data.get("item")
    if kind == ITEM_ADDED and _is_call(item):
        return EventFacts(call_key=item.get("call_id") or item.get("id") or data.get("output_index"))
    response = data.get("response")
    if kind not in ID_EVENTS or not isinstance(response, dict):
        return NO_FACTS
    if kind == "response.created":
        return EventFacts(response_id=response_id(data))
    failed = None
    if kind == "response.failed":
        failed = error_text(response.get("error") or "response.failed")
    usage = response.get("usage") if isinstance(response.get("usage"), dict) else None
    return EventFacts(usage, finish_reason(response), True, failed, response_id(data))


def owns_event(kind: str) -> bool:
    """A stream event `type` of this API: response.*, and `error` (the same event in Messages)."""
    return kind.startswith("response.") or kind == "error"


def fold_text(kind: str, event: dict, texts: list, thoughts: list, calls: dict) -> None:
    """One stream event's answer and reasoning deltas; the calls from the end event's output (whole,
    chat-shaped)."""
    delta = event.get("delta")
    if isinstance(delta, str):
        if kind in ANSWER_TEXT_EVENTS:
            texts.append(delta)
        elif RESPONSES_DELTA_CHANNELS.get(kind) == REASONING:
            thoughts.append(delta)
    if kind in END_EVENTS and isinstance(event.get("response"), dict):
        calls.clear()
        calls.update(enumerate(output_texts(event["response"])[2]))


# The write rules: how a replayed body lays out a prompt, tools, tool_choice, a format and its length.


def spell(spelled: Sequence[tuple[str, str]]) -> dict:
    """A leading system message becomes `instructions`; tool results are function_call_output items."""
    fields: dict = {}
    if spelled and spelled[0][0] == "system":
        fields["instructions"] = spelled[0][1]
        spelled = spelled[1:]
    items = []
    for i, (role, text) in enumerate(spelled):
        if role == "tool":
            items.append({"type": "function_call_output", "call_id": f"call_{i}", "output": text})
        else:
            items.append({"role": role, "content": text})
    fields["input"] = items
    return fields


def tool_definition(name: str, description: str, schema: dict) -> dict:
    return {"type": "function", "name": name, "description": description, "parameters": schema}


def sent_tool_choice(recorded: str, first_tool: str) -> object:
    """The trace's tool_choice as sent: the modes by name, a forced call as the first tool's."""
    return {"type": "function", "name": first_tool} if recorded == "function" else recorded


def sent_format(kind: str, description: str) -> dict | None:
    if kind == "json_object":
        return {"type": "json_object"}
    if kind == "json_schema":
        schema = {**ANSWER_SCHEMA, "description": description}
        return {"type": "json_schema", "name": "replay_schema", "schema": schema}
    return None


def under_grammar(body: dict) -> bool:
    return "format" in (body.get("text") or {}) or forced_choice(body.get("tool_choice"), ("auto", "none"))


BODY = ApiBody(
    "responses",
    builder="spelled",
    limit_field="max_output_tokens",
    prompt_field="input",
    prompt_as_sent=True,  # a string input is a prompt of its own
    system_field="instructions",
    spell=spell,
    tool=tool_definition,
    tool_name=lambda tool: tool.get("name"),
    tool_choice=sent_tool_choice,
    formats=sent_format,
    format_fields=lambda fmt: {"text": {"format": fmt}},
    under_grammar=under_grammar,
    chat=chat_view,
    sampling=("temperature", "top_p", "seed"),  # seed: vLLM's ResponsesRequest has it
)
