"""Request fields in each API's own shape (Responses, Messages): one row per endpoint, so adding an API
is adding a row. Pure functions of spelled text and recorded values; no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

ANSWER_SCHEMA = {"type": "object", "properties": {"answer": {"type": "string"}}}


@dataclass(frozen=True, slots=True)
class ApiBody:
    """How one API spells what a chat body carries; `chat_*` give the chat view the engine templates."""

    endpoint: str
    limit_field: str  # the output length limit
    prompt_field: str  # where the conversation goes (its content column holds this field's value)
    system_field: str  # where the system prompt goes (content_system holds this field's value)
    spell: Callable[[Sequence[tuple[str, str]]], dict]  # (role, text) -> prompt (and system) fields
    tool: Callable[[str, str, dict], dict]  # (name, description, JSON schema) -> one tool definition
    tool_name: Callable[[dict], str | None]  # a tool definition's name
    tool_choice: Callable[[str, str], object]  # (the trace's TOOL_CHOICES value, first tool's name)
    formats: Callable[[str, str], dict | None]  # (structured_output kind, schema description) -> format
    format_fields: Callable[[dict], dict]  # the API's own format object -> the body fields holding it
    under_grammar: Callable[[dict], bool]  # the body's answer is grammar-constrained
    chat: Callable[[Sequence[tuple[str, str]]], list[dict]]  # spelled -> the chat messages it templates as
    sampling: tuple[str, ...]  # the trace's SAMPLING_COLUMNS the API has


def _responses_spell(spelled: Sequence[tuple[str, str]]) -> dict:
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


def _messages_spell(spelled: Sequence[tuple[str, str]]) -> dict:
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


def _responses_choice(recorded: str, first_tool: str) -> object:
    return {"type": "function", "name": first_tool} if recorded == "function" else recorded


_MESSAGES_CHOICES = {"auto": "auto", "none": "none", "required": "any"}


def _messages_choice(recorded: str, first_tool: str) -> object:
    if recorded == "function":
        return {"type": "tool", "name": first_tool}
    return {"type": _MESSAGES_CHOICES[recorded]}


def _responses_formats(kind: str, description: str) -> dict | None:
    if kind == "json_object":
        return {"type": "json_object"}
    if kind == "json_schema":
        schema = {**ANSWER_SCHEMA, "description": description}
        return {"type": "json_schema", "name": "replay_schema", "schema": schema}
    return None


def _messages_formats(kind: str, description: str) -> dict | None:
    """Messages has JSON-schema output only: a json_object request is sent as an open object schema."""
    if kind in ("json_object", "json_schema"):
        schema = (
            {**ANSWER_SCHEMA, "description": description} if kind == "json_schema" else {"type": "object"}
        )
        return {"type": "json_schema", "schema": schema}
    return None


def _forced_choice(choice: object, free: tuple) -> bool:
    if isinstance(choice, dict):
        return choice.get("type") not in free
    return choice not in (None, *free)


API_BODIES: dict[str, ApiBody] = {
    row.endpoint: row
    for row in (
        ApiBody(
            "responses",
            limit_field="max_output_tokens",
            prompt_field="input",
            system_field="instructions",
            spell=_responses_spell,
            tool=lambda name, description, schema: {
                "type": "function",
                "name": name,
                "description": description,
                "parameters": schema,
            },  # fmt: skip
            tool_name=lambda tool: tool.get("name"),
            tool_choice=_responses_choice,
            formats=_responses_formats,
            format_fields=lambda fmt: {"text": {"format": fmt}},
            under_grammar=lambda body: (
                "format" in (body.get("text") or {})
                or _forced_choice(body.get("tool_choice"), ("auto", "none"))
            ),
            chat=lambda spelled: chat_view(spelled),
            sampling=("temperature", "top_p", "seed"),  # seed: vLLM's ResponsesRequest has it
        ),
        ApiBody(
            "messages",
            limit_field="max_tokens",
            prompt_field="messages",
            system_field="system",
            spell=_messages_spell,
            tool=lambda name, description, schema: {
                "name": name,
                "description": description,
                "input_schema": schema,
            },  # fmt: skip
            tool_name=lambda tool: tool.get("name"),
            tool_choice=_messages_choice,
            formats=_messages_formats,
            format_fields=lambda fmt: {"output_config": {"format": fmt}},
            under_grammar=lambda body: (
                "format" in (body.get("output_config") or {})
                or _forced_choice(body.get("tool_choice"), ("auto", "none"))
            ),
            chat=lambda spelled: _system_first(chat_view(spelled)),
            sampling=("temperature", "top_p"),
        ),
    )
}


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


def _system_first(messages: list[dict]) -> list[dict]:
    """Messages' one `system` field is templated as a single leading system message."""
    systems = [m["content"] for m in messages if m["role"] == "system"]
    rest = [m for m in messages if m["role"] != "system"]
    return ([{"role": "system", "content": "".join(systems)}] if systems else []) + rest


def tagged(prompt: object, tag: str) -> object:
    """Recorded prompt with a per-copy tag in front of its first text (so copies share no prefix)."""
    if not tag:
        return prompt
    if isinstance(prompt, str):
        return tag + prompt
    if prompt and isinstance(prompt[0], dict) and isinstance(prompt[0].get("content"), str):
        return [{**prompt[0], "content": tag + prompt[0]["content"]}, *prompt[1:]]
    return prompt
