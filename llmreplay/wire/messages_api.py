"""The Anthropic Messages API (/v1/messages): its request fields, stream events and answer body, read
into the shapes every dialect shares, and how a replayed body lays them out (BODY). Pure, light imports:
the recorder's proxy and the replay loop use it.
"""

from __future__ import annotations

from collections.abc import Sequence

import orjson

from llmreplay.wire.answer import Answer
from llmreplay.wire.api_body import ANSWER_SCHEMA, ApiBody, forced_choice
from llmreplay.wire.channels import ANSWER, MESSAGES_BLOCK_CHANNELS, MESSAGES_DELTA_CHANNELS, REASONING
from llmreplay.wire.chat_api import chat_view
from llmreplay.wire.error_object import error_text
from llmreplay.wire.json_array import array_items
from llmreplay.wire.message_text import PromptMessage
from llmreplay.wire.stream_event import NO_FACTS, EventFacts, event_type
from llmreplay.wire.usage import parse_usage

# stop_reason -> the chat finish reason (pause_turn and refusal keep their names)
STOP_REASONS = {"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length", "tool_use": "tool_calls"}
END_EVENTS = ("message_stop",)
ERROR_EVENTS = ("error",)
BLOCK_START, BLOCK_DELTA = "content_block_start", "content_block_delta"
TOOL_BLOCKS = ("tool_use", "server_tool_use")
EVENT_TYPES = (
    "message_start",
    BLOCK_START,
    BLOCK_DELTA,
    "content_block_stop",
    "message_delta",
    "message_stop",
)
EVENT_TYPES += ("ping",)
# The stream's byte rules (replayer/loop/sse.py): a content_block_delta's tokens are a non-empty
# string under its delta type's key (MESSAGES_DELTA_CHANNELS), on that key's channel; the events
# read whole besides the end events and `error` (event_facts).
DELTA_RULES = {
    BLOCK_DELTA: tuple(
        (tuple(key for key, c in MESSAGES_DELTA_CHANNELS.values() if c == channel), channel)
        for channel in (ANSWER, REASONING)
    )
}
PARSED_EVENTS = ("message_start", BLOCK_START, "message_delta")
# the trace's tool_choice -> Anthropic's tool_choice `type` (`tool`: a named tool forced); read inverted
CHOICE_TYPES = {"auto": "auto", "none": "none", "required": "any", "function": "tool"}
_RECORDED_CHOICE = {sent: recorded for recorded, sent in CHOICE_TYPES.items()}


def request_messages(body: dict) -> tuple[PromptMessage, ...]:
    """`system` first, then each message: the texts of its text-bearing blocks (text, thinking,
    tool_use name + input JSON, tool_result content) joined by newlines; images and documents count
    nothing, nor redacted thinking (it is encrypted)."""
    messages = []
    system = blocks_text(body.get("system"))
    if system:
        messages.append(PromptMessage("system", system))
    for message in array_items(body.get("messages")):
        if isinstance(message, dict):
            role = message.get("role") if isinstance(message.get("role"), str) else "unknown"
            messages.append(PromptMessage(role, blocks_text(message.get("content"))))
    return tuple(messages)


def blocks_text(content) -> str:
    """A content value's counted text: a string, or its blocks' texts joined by newlines."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    return "\n".join(text for text in map(block_text, content) if text)


def block_text(block) -> str:
    """One content block's generated or given text; "" for images, documents and encrypted blocks."""
    if not isinstance(block, dict):
        return block if isinstance(block, str) else ""
    kind = block.get("type")
    if kind == "text":
        return _str(block.get("text"))
    if kind == "thinking":
        return _str(block.get("thinking"))
    if kind in TOOL_BLOCKS:
        return f"{_str(block.get('name'))}{tool_input_json(block.get('input'))}"
    if kind == "tool_result":
        return blocks_text(block.get("content"))
    return ""


def tool_input_json(value) -> str:
    """A tool_use block's input as the JSON text its tokens are counted over (compact, as generated)."""
    if value is None or value == {}:
        return "" if value is None else "{}"
    try:
        return orjson.dumps(value).decode()
    except (TypeError, orjson.JSONEncodeError):
        return ""


def request_tools(body: dict) -> tuple[dict, ...]:
    """Tool definitions as chat's {name, description, parameters} (`input_schema` is the parameters)."""
    tools = body.get("tools")
    return tuple(
        {
            "name": tool.get("name") or tool.get("type"),
            "description": tool.get("description"),
            "parameters": tool.get("input_schema"),
        }
        for tool in (tools if isinstance(tools, list) else ())
        if isinstance(tool, dict)
    )


def request_tool_choice(body: dict) -> str | None:
    """auto | none | required (Anthropic `any`) | function (`tool`: a named tool forced)."""
    choice = body.get("tool_choice")
    kind = choice.get("type") if isinstance(choice, dict) else None
    return _RECORDED_CHOICE.get(_str(kind))


def request_format(body: dict) -> object:
    """`output_format` (or `output_config.format`), as sent (content_response_format holds it)."""
    config = body.get("output_config")
    return body.get("output_format", config.get("format") if isinstance(config, dict) else None)


def item_text(message) -> tuple[str, str]:
    """One message's (role, counted text: its blocks'), as the anonymizer rewrites it."""
    if not isinstance(message, dict):
        return "unknown", ""
    role = message.get("role") if isinstance(message.get("role"), str) else "unknown"
    return role, blocks_text(message.get("content"))


def echoed_answers(response) -> tuple[tuple[PromptMessage, ...], ...]:
    """The forms a ResponseShape comes back in the next request: one assistant message of
    [thinking], text and tool_use blocks, with or without the thinking, where clients differ."""
    uses = tuple(_tool_use_text(call) for call in response.tool_calls)
    plain = "\n".join(text for text in (response.text, *uses) if text)
    forms = [(PromptMessage("assistant", plain),)]
    if response.reasoning_text:
        thought = "\n".join(text for text in (response.reasoning_text, response.text, *uses) if text)
        forms.append((PromptMessage("assistant", thought),))
    return tuple(forms)


def _tool_use_text(call: dict) -> str:
    """A tool_use block as the next request counts it: the name, then its input as compact JSON."""
    function = call.get("function") or {}
    try:
        arguments = orjson.loads(function.get("arguments") or "null")
    except orjson.JSONDecodeError:
        arguments = None
    return f"{function.get('name') or ''}{tool_input_json(arguments)}"


def request_structured(body: dict) -> tuple[str, dict | None]:
    """(none | json_schema, the schema) from `output_format` or `output_config.format`."""
    fmt = body.get("output_format")
    config = body.get("output_config")
    if not isinstance(fmt, dict) and isinstance(config, dict):
        fmt = config.get("format")
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        schema = fmt.get("schema")
        return "json_schema", schema if isinstance(schema, dict) else None
    return "none", None


def max_output_tokens(body: dict) -> int | None:
    value = body.get("max_tokens")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def server_state(body: dict) -> tuple[None, None]:
    """The Messages API keeps no state on the server: every request carries its whole history."""
    return None, None


def event_channel(event_name: str | None, data: dict) -> str | None:
    """The channel a stream event's generated tokens go to (llmreplay.wire.channels); None: none."""
    kind = event_type(event_name, data)
    if kind == BLOCK_DELTA:
        part, table = data.get("delta"), MESSAGES_DELTA_CHANNELS
    elif kind == BLOCK_START:
        part, table = data.get("content_block"), MESSAGES_BLOCK_CHANNELS
    else:
        return None
    if not isinstance(part, dict):
        return None
    key, channel = table.get(_str(part.get("type")), (None, None))
    value = part.get(key) if key is not None else None
    return channel if isinstance(value, str) and value else None


def response_id(data: dict) -> str | None:
    """message_start's `message.id`, or a whole body's `id`."""
    message = data.get("message")
    if isinstance(message, dict):
        data = message
    value = data.get("id")
    return value if isinstance(value, str) and value else None


def finish_reason(stop_reason) -> str | None:
    """Anthropic's stop_reason as chat's finish reason: end_turn -> stop, max_tokens -> length,
    tool_use -> tool_calls; None while the message has not stopped."""
    if not isinstance(stop_reason, str) or not stop_reason:
        return None
    return STOP_REASONS.get(stop_reason, stop_reason)


def output_texts(message: dict) -> tuple[str, str, tuple[dict, ...]]:
    """(answer text, thinking text, tool calls in chat's shape) of a message's `content` blocks."""
    texts, thoughts, calls = [], [], []
    for block in array_items(message.get("content")):
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text":
            texts.append(_str(block.get("text")))
        elif kind == "thinking":
            thoughts.append(_str(block.get("thinking")))
        elif kind == "tool_use":
            calls.append(chat_call(block.get("id"), block.get("name"), tool_input_json(block.get("input"))))
    return "".join(texts), "".join(thoughts), tuple(calls)


def chat_call(call_id, name, arguments: str) -> dict:
    """A tool_use block in chat's tool-call shape."""
    return {"id": call_id, "type": "function", "function": {"name": _str(name), "arguments": arguments}}


def _str(value) -> str:
    return value if isinstance(value, str) else ""


def answer(data: dict) -> Answer:
    """A whole message body."""
    text, thinking, calls = output_texts(data)
    stop = finish_reason(data.get("stop_reason"))
    return Answer(text, thinking, calls, stop, parse_usage(data.get("usage")), response_id(data))


def event_facts(kind: str, data: dict) -> EventFacts:
    """message_start (id, usage), content_block_start of a tool_use (a call), message_delta (usage,
    stop reason), message_stop (the end), error."""
    if kind == "message_start":
        message = data.get("message") if isinstance(data.get("message"), dict) else {}
        usage = message.get("usage") if isinstance(message.get("usage"), dict) else None
        return EventFacts(usage=usage, response_id=response_id(data))
    if kind == "message_delta":
        delta = data.get("delta") if isinstance(data.get("delta"), dict) else {}
        usage = data.get("usage") if isinstance(data.get("usage"), dict) else None
        return EventFacts(usage=usage, finish_reason=finish_reason(delta.get("stop_reason")))
    if kind == "message_stop":
        return EventFacts(done=True)
    if kind == "error":
        return EventFacts(failed=error_text(data.get("error") or data))
    block = data.get("content_block")
    if kind == BLOCK_START and isinstance(block, dict) and block.get("type") in TOOL_BLOCKS:
        return EventFacts(call_key=data.get("index", block.get("id")))
    return NO_FACTS


def owns_event(kind: str) -> bool:
    """A stream event `type` of this API (`error` is read as Responses' same event)."""
    return kind in EVENT_TYPES


def fold_text(kind: str, event: dict, texts: list, thoughts: list, calls: dict) -> None:
    """One stream event's text and thinking deltas; a tool_use block's name, then its
    input_json_delta pieces."""
    index = event.get("index", len(calls))
    block = event.get("content_block")
    if kind == BLOCK_START and isinstance(block, dict):
        if block.get("type") in TOOL_BLOCKS:
            calls[index] = chat_call(block.get("id"), block.get("name"), "")
        elif isinstance(block.get("text"), str):
            texts.append(block["text"])
        return
    delta = event.get("delta")
    if kind != BLOCK_DELTA or not isinstance(delta, dict):
        return
    part = delta.get("type")
    if part == "text_delta" and isinstance(delta.get("text"), str):
        texts.append(delta["text"])
    elif part == "thinking_delta" and isinstance(delta.get("thinking"), str):
        thoughts.append(delta["thinking"])
    elif part == "input_json_delta" and isinstance(delta.get("partial_json"), str) and index in calls:
        calls[index]["function"]["arguments"] += delta["partial_json"]


# The write rules: how a replayed body lays out a prompt, tools, tool_choice, a format and its length.


def spell(spelled: Sequence[tuple[str, str]]) -> dict:
    """System messages go to `system` (Messages has no system role); tool results are tool_result blocks."""
    fields: dict = {}
    systems = [text for role, text in spelled if role == "system"]
    if systems:
        fields["system"] = "".join(systems)
    messages = []
    for i, (role, text) in enumerate(spelled):
        if role == "system":
            continue
        if role == "tool":
            block = {"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": text}
            messages.append({"role": "user", "content": [block]})
        else:
            messages.append({"role": "assistant" if role == "assistant" else "user", "content": text})
    fields["messages"] = messages
    return fields


def tool_definition(name: str, description: str, schema: dict) -> dict:
    return {"name": name, "description": description, "input_schema": schema}


def sent_tool_choice(recorded: str, first_tool: str) -> dict:
    """The trace's tool_choice as Anthropic's object; a forced call names the first tool."""
    choice = {"type": CHOICE_TYPES[recorded]}
    return {**choice, "name": first_tool} if recorded == "function" else choice


def sent_format(kind: str, description: str) -> dict | None:
    """Messages has JSON-schema output only: a json_object request is sent as an open object schema."""
    if kind in ("json_object", "json_schema"):
        schema = (
            {**ANSWER_SCHEMA, "description": description} if kind == "json_schema" else {"type": "object"}
        )
        return {"type": "json_schema", "schema": schema}
    return None


def under_grammar(body: dict) -> bool:
    config = body.get("output_config") or {}
    return "format" in config or forced_choice(body.get("tool_choice"), ("auto", "none"))


def chat_messages(spelled: Sequence[tuple[str, str]]) -> list[dict]:
    """The chat view, with Messages' one `system` field templated as a single leading system message."""
    messages = chat_view(spelled)
    systems = [m["content"] for m in messages if m["role"] == "system"]
    rest = [m for m in messages if m["role"] != "system"]
    return ([{"role": "system", "content": "".join(systems)}] if systems else []) + rest


BODY = ApiBody(
    "messages",
    builder="spelled",
    limit_field="max_tokens",
    limit_required=True,  # Messages refuses a body without max_tokens
    prompt_field="messages",
    system_field="system",
    spell=spell,
    tool=tool_definition,
    tool_name=lambda tool: tool.get("name"),
    tool_choice=sent_tool_choice,
    formats=sent_format,
    format_fields=lambda fmt: {"output_config": {"format": fmt}},
    under_grammar=under_grammar,
    chat=chat_messages,
    sampling=("temperature", "top_p"),
)
