"""Request JSON -> the trace columns a request body determines, and the texts left to tokenize.

Pure (tokenizing happens in the converter process). ValueError for a body that is not a JSON object.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import orjson

from llmreplay.wire.dialects import dialect_for
from llmreplay.wire.message_text import PromptMessage as ChatMessage  # role and counted text

__all__ = ["ChatMessage", "RequestShape", "parse_request"]


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
    state_ref: str | None = None  # the stored response or conversation a Responses request continues


def parse_request(endpoint: str, body: bytes, with_content: bool = True) -> RequestShape:
    """The request's shape; the content_* JSON texts only `with_content` (re-serializing costs CPU).
    Where the API keeps the prompt and system prompt is its dialect's layout (ApiBody), kept as sent."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"request body is not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ValueError(f"request body is a JSON {type(data).__name__}, not an object")
    dialect = dialect_for(endpoint)
    layout = dialect.body
    tools = data.get("tools") if isinstance(data.get("tools"), list) else None
    structured, schema = dialect.request_structured(data)
    state, state_ref = dialect.server_state(data)
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
        tools_count=len(dialect.request_tools(data)),
        tool_choice=dialect.request_tool_choice(data),
        structured_output=structured,
        server_state=state,
    )
    shape = dict(
        user=_str(data.get("user")),
        include_usage=_include_usage(data),
        tools_json=_json(tools) if tools else None,
        schema_json=_json(schema) if schema is not None else None,
        state_ref=state_ref,
    )
    prompt = data.get(layout.prompt_field)
    if layout.prompt_column == "content_messages":
        if not layout.prompt_as_sent and not isinstance(prompt, list):
            prompt = []
        shape.update(messages=tuple(ChatMessage(*m) for m in dialect.request_messages(data)))
    else:
        ids = _token_ids(prompt)
        shape.update(prompt_text=None if ids is not None else _prompt_text(prompt), prompt_token_ids=ids)
    if with_content:
        columns[layout.prompt_column] = _json(prompt)
        columns["content_tools"] = _json(tools) if tools else None
        fmt = dialect.request_format(data)
        columns["content_response_format"] = _json(fmt) if fmt is not None else None
        system = data.get(layout.system_field) if layout.system_field else None
        columns["content_system"] = _json(system) if system is not None else None
    return RequestShape(columns=columns, **shape)


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
