"""Chat Completions (/v1/chat/completions): the request fields and answer body (every dialect also
reads them; completions and embeddings share them), and how a replayed body lays them out (BODY).
Pure, light imports."""

from __future__ import annotations

from collections.abc import Sequence

from llmreplay.trace_format import SAMPLING_COLUMNS
from llmreplay.wire.answer import Answer
from llmreplay.wire.api_body import ApiBody
from llmreplay.wire.channels import REASONING, TEXT_CHANNELS
from llmreplay.wire.channels import event_channel as chunk_channel
from llmreplay.wire.json_array import array_items
from llmreplay.wire.message_text import PromptMessage, call_text, content_text, message_text
from llmreplay.wire.usage import parse_usage

_REASONING_KEYS = tuple(key for key, channel in TEXT_CHANNELS.items() if channel == REASONING)
TOOL_CHOICE_MODES = ("auto", "none", "required")


def request_messages(body: dict) -> tuple[PromptMessage, ...]:
    messages = body.get("messages")
    return tuple(PromptMessage(*message_text(m)) for m in (messages if isinstance(messages, list) else ()))


def request_tools(body: dict) -> tuple[dict, ...]:
    tools = body.get("tools")
    found = []
    for tool in tools if isinstance(tools, list) else ():
        function = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(function, dict):
            found.append({k: function.get(k) for k in ("name", "description", "parameters")})
    return tuple(found)


def request_tool_choice(body: dict) -> str | None:
    choice = body.get("tool_choice")
    if isinstance(choice, dict):
        return "function"
    return choice if choice in TOOL_CHOICE_MODES else None


def request_format(body: dict) -> object:
    """The API's own output-format object, as sent (content_response_format holds it)."""
    return body.get("response_format")


def item_text(message) -> tuple[str, str]:
    """One message's (role, counted text), as the anonymizer rewrites it."""
    return message_text(message)


def echoed_answers(response) -> tuple[tuple[PromptMessage, ...], ...]:
    """The forms a ResponseShape comes back in the next request: one assistant message, its text
    then its calls."""
    text = response.text + "".join(call_text(call) for call in response.tool_calls)
    return ((PromptMessage("assistant", text),),)


def request_structured(body: dict) -> tuple[str, dict | None]:
    fmt = body.get("response_format")
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind == "json_schema":
        spec = fmt.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, dict) else None
        return "json_schema", schema if isinstance(schema, dict) else None
    return ("json_object", None) if kind == "json_object" else ("none", None)


def max_output_tokens(body: dict) -> int | None:
    value = body.get("max_completion_tokens", body.get("max_tokens"))
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def server_state(body: dict) -> tuple[None, None]:
    return None, None


def event_channel(event_name: str | None, data: dict) -> str | None:
    return chunk_channel(data)


def response_id(data: dict) -> str | None:
    value = data.get("id")
    return value if isinstance(value, str) and value else None


def answer(data: dict) -> Answer:
    """choices[0]'s message (chat) or text (completions)."""
    choices = array_items(data.get("choices"))
    first = choices[0] if choices and isinstance(choices[0], dict) else {}
    message = first.get("message") if isinstance(first.get("message"), dict) else {}
    text = content_text(message.get("content")) if message else first.get("text") or ""
    reasoning = next((message[k] for k in _REASONING_KEYS if isinstance(message.get(k), str)), "")
    calls = tuple(c for c in array_items(message.get("tool_calls")) if isinstance(c, dict))
    finish = first.get("finish_reason")
    return Answer(
        text if isinstance(text, str) else "",
        reasoning,
        calls,
        finish if isinstance(finish, str) else None,
        parse_usage(data.get("usage")),
        response_id(data),
    )


def chat_view(spelled: Sequence[tuple[str, str]]) -> list[dict]:
    """The chat messages an engine templates a spelled prompt as (vLLM converts Responses and Messages
    bodies to chat messages: tool results become `tool` messages), for counting it on the target."""
    out = []
    for i, (role, text) in enumerate(spelled):
        message = {"role": role, "content": text}
        if role == "tool":
            message["tool_call_id"] = f"call_{i}"
        out.append(message)
    return out


# The write rules: how a replayed body lays out messages, tools, tool_choice, a format and its length.


def spell(spelled: Sequence[tuple[str, str]]) -> dict:
    return {"messages": chat_view(spelled)}


def tool_definition(name: str, description: str, schema: dict) -> dict:
    return {"type": "function", "function": {"name": name, "description": description, "parameters": schema}}


def tool_name(tool: dict) -> str | None:
    function = tool.get("function")
    return function.get("name") if isinstance(function, dict) else None


def sent_tool_choice(recorded: str, first_tool: str) -> object:
    """The trace's tool_choice as sent: the modes by name, a forced call as the first tool's."""
    return {"type": "function", "function": {"name": first_tool}} if recorded == "function" else recorded


def sent_format(kind: str, description: str) -> dict | None:
    if kind == "json_object":
        return {"type": "json_object"}
    if kind == "json_schema":
        schema = {"type": "object", "description": description, "properties": {"answer": {"type": "string"}}}
        return {"type": "json_schema", "json_schema": {"name": "replay_schema", "schema": schema}}
    return None


def under_grammar(body: dict) -> bool:
    """The answer is constrained by a grammar: a response_format, or a tool call that must be made."""
    return "response_format" in body or body.get("tool_choice") not in (None, "auto", "none")


BODY = ApiBody(
    "chat_completions",
    builder="chat",
    prompt_field="messages",
    spell=spell,
    chat=chat_view,
    under_grammar=under_grammar,
    tool=tool_definition,
    tool_name=tool_name,
    tool_choice=sent_tool_choice,
    formats=sent_format,
    format_fields=lambda fmt: {"response_format": fmt},
    sampling=SAMPLING_COLUMNS,
    asks_usage=True,
)
