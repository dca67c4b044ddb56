"""Request JSON -> the trace columns a request body determines, and the texts left to tokenize.

Pure (tokenizing happens in the converter process). ValueError for a body that is not a JSON object.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import orjson

from llmreplay.openai_wire.message_text import content_text, message_text
from llmreplay.trace_format import TOOL_CHOICES


@dataclass(frozen=True, slots=True)
class ChatMessage:
    """One message reduced to what counts tokens and identifies a turn: role and flattened text."""

    role: str
    text: str


@dataclass(frozen=True, slots=True)
class RequestShape:
    """`columns`: trace columns by name (of REQUEST_COLUMNS; absent ones keep TraceRecord's defaults)."""

    columns: dict[str, object] = field(default_factory=dict)
    user: str | None = None  # hashed into user_id; a session key with --session-from-user
    include_usage: bool = False
    tools_json: str | None = None  # tool definitions as JSON text (tokenized for tool_definition_tokens)
    schema_json: str | None = None
    messages: tuple[ChatMessage, ...] | None = None  # chat-style requests
    prompt_text: str | None = None  # completions / embeddings
    prompt_token_ids: tuple[int, ...] | None = None  # a completions prompt sent as token ids


def parse_request(endpoint: str, body: bytes, with_content: bool = True) -> RequestShape:
    """The request's shape; the content_* JSON texts only `with_content` (re-serializing costs CPU)."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"request body is not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ValueError(f"request body is a JSON {type(data).__name__}, not an object")
    tools = data.get("tools") if isinstance(data.get("tools"), list) else None
    structured, schema = _structured_output(data)
    columns = dict(
        model=_str(data.get("model")),
        stream=data.get("stream") is True,
        max_tokens=_int(
            data.get("max_completion_tokens", data.get("max_tokens", data.get("max_output_tokens")))
        ),
        temperature=_float(data.get("temperature")),
        top_p=_float(data.get("top_p")),
        n=_int(data.get("n")),
        stop_present=bool(data.get("stop")),
        seed=_int(data.get("seed")),
        tools_count=len(tools or ()),
        tool_choice=_tool_choice(data.get("tool_choice")),
        structured_output=structured,
    )
    shape = dict(
        user=_str(data.get("user")),
        include_usage=_include_usage(data),
        tools_json=_json(tools) if tools else None,
        schema_json=schema,
    )
    if endpoint == "chat_completions":
        raw = data.get("messages")
        messages = raw if isinstance(raw, list) else []
        shape.update(messages=tuple(_chat_message(m) for m in messages))
        sent = ("content_messages", messages)
    elif endpoint == "responses":
        shape.update(messages=_responses_input(data))
        sent = ("content_messages", data.get("input"))
    else:
        prompt = data.get("prompt" if endpoint == "completions" else "input")
        ids = _token_ids(prompt)
        shape.update(prompt_text=None if ids is not None else _prompt_text(prompt), prompt_token_ids=ids)
        sent = ("content_prompt", prompt)
    if with_content:
        columns[sent[0]] = _json(sent[1])
        columns["content_tools"] = _json(tools) if tools else None
        columns["content_response_format"] = (
            _json(data["response_format"]) if "response_format" in data else None
        )
    return RequestShape(columns=columns, **shape)


def _chat_message(message) -> ChatMessage:
    return ChatMessage(*message_text(message))


def _responses_input(data: dict) -> tuple[ChatMessage, ...]:
    messages = []
    if isinstance(data.get("instructions"), str):
        messages.append(ChatMessage("system", data["instructions"]))
    items = data.get("input")
    if isinstance(items, str):
        return (*messages, ChatMessage("user", items))
    for item in items if isinstance(items, list) else ():
        if not isinstance(item, dict):
            continue
        kind = item.get("type")
        if kind == "function_call":
            messages.append(
                ChatMessage("assistant", f"{item.get('name') or ''}{item.get('arguments') or ''}")
            )
        elif kind == "function_call_output":
            messages.append(ChatMessage("tool", str(item.get("output") or "")))
        else:
            messages.append(ChatMessage(_str(item.get("role")) or "user", content_text(item.get("content"))))
    return tuple(messages)


def _structured_output(data: dict) -> tuple[str, str | None]:
    fmt = data.get("response_format")
    if not isinstance(fmt, dict):
        text = data.get("text")
        fmt = text.get("format") if isinstance(text, dict) else None  # Responses API
    if not isinstance(fmt, dict):
        return "none", None
    kind = fmt.get("type")
    if kind == "json_schema":
        schema = fmt.get("json_schema", fmt)
        schema = schema.get("schema", schema) if isinstance(schema, dict) else schema
        return "json_schema", _json(schema)
    if kind == "json_object":
        return "json_object", None
    return "none", None


def _tool_choice(value) -> str | None:
    if isinstance(value, dict):
        return "function"
    return value if isinstance(value, str) and value in TOOL_CHOICES else None


def _include_usage(data: dict) -> bool:
    options = data.get("stream_options")
    return isinstance(options, dict) and options.get("include_usage") is True


def _prompt_text(prompt) -> str:
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list):
        return "\n".join(p for p in prompt if isinstance(p, str))
    return ""


def _token_ids(prompt) -> tuple[int, ...] | None:
    """A prompt given as token ids (or a batch of them) bypasses the tokenizer."""
    if isinstance(prompt, list) and prompt and all(_token_id(t) for t in prompt):
        return tuple(prompt)
    if isinstance(prompt, list) and prompt and all(isinstance(p, list) for p in prompt):
        flat = [t for p in prompt for t in p]
        if all(_token_id(t) for t in flat):
            return tuple(flat)
    return None


def _token_id(value) -> bool:
    """A token id as the prefix hasher packs it (unsigned 32 bits); anything else is not a token prompt."""
    return type(value) is int and 0 <= value < 2**32


def _json(value) -> str:
    """JSON text of a request part; ValueError for what orjson cannot write back (nesting beyond 254)."""
    try:
        return orjson.dumps(value).decode()
    except orjson.JSONEncodeError as exc:
        raise ValueError(f"request part not re-serializable ({exc})") from None


def _str(value) -> str | None:
    return value if isinstance(value, str) else None


def _int(value) -> int | None:
    """An integer field; one beyond 64 bits (orjson reads it as a float) stays an int, out of every
    column's range, so the row check names it in invalid_fields instead of dropping it silently."""
    if isinstance(value, float) and value.is_integer() and abs(value) >= 2**63:
        return int(value)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _float(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)
