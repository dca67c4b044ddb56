"""Parse and validate an OpenAI request body at the edge, into a plain record the sim works with.

Anything malformed raises InvalidRequest, which the server answers with an OpenAI error body.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import orjson

from llmreplay.wire.message_text import message_text

TOOL_CHOICE_MODES = ("none", "auto", "required")


class InvalidRequest(Exception):
    """An HTTP error answer: status, OpenAI error `code` and the offending `param`."""

    def __init__(
        self, message: str, status: int = 400, code: str = "invalid_request", param: str | None = None
    ):
        super().__init__(message)
        self.status = status
        self.code = code
        self.param = param


@dataclass(frozen=True, slots=True)
class CompletionRequest:
    endpoint: str  # chat_completions | completions
    model: str | None
    stream: bool
    include_usage: bool
    prompt_texts: tuple[str, ...]  # rendered in order (tool definitions first, then each message)
    prompt_token_ids: tuple[int, ...] | None  # a completions prompt given as token ids
    message_count: int
    max_tokens: int | None
    min_tokens: int
    ignore_eos: bool
    tool_name: str | None  # the function to call when the answer is a tool call
    cache_salt: str | None = None  # vLLM's: prompts with different salts share no cached prefix
    # Responses API state: the stored conversation continued (its token ids go after the first
    # `history_after` prompt texts: tools and instructions), and whether this answer is stored.
    previous_response_id: str | None = None
    history_after: int = 0
    store: bool = False
    echo: dict | None = None  # request fields a Responses answer repeats


def json_object(raw: bytes) -> dict:
    """The request body as a JSON object, else InvalidRequest (invalid_json)."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequest(f"request body is not valid JSON: {exc}", code="invalid_json") from None
    if not isinstance(body, dict):
        raise InvalidRequest("request body must be a JSON object", code="invalid_json")
    return body


def parse_body(raw: bytes, endpoint: str) -> CompletionRequest:
    body = json_object(raw)
    model = optional(body, "model", str)
    stream = optional(body, "stream", bool) or False
    stream_options = optional(body, "stream_options", dict) or {}
    include_usage = stream_options.get("include_usage") is True
    n = optional(body, "n", int)
    if n not in (None, 1):
        raise InvalidRequest("the sim answers n=1 only", param="n")
    max_tokens = positive_int(body, "max_tokens")
    if endpoint == "chat_completions":
        max_tokens = positive_int(body, "max_completion_tokens") or max_tokens
    min_tokens, ignore_eos = length_extensions(body)
    if endpoint == "chat_completions":
        messages = _messages(body)
        texts, tool_name = _tools(body, messages)
        texts += tuple(_message_text(i, m) for i, m in enumerate(messages))
        token_ids, message_count = None, len(messages)
    else:
        texts, token_ids = _prompt(body)
        tool_name, message_count = None, 0
    return CompletionRequest(
        endpoint, model, stream, include_usage, texts, token_ids, message_count,
        max_tokens, min_tokens, ignore_eos, tool_name, optional(body, "cache_salt", str),
    )  # fmt: skip


def length_extensions(body: dict) -> tuple[int, bool]:
    """(min_tokens, ignore_eos): the engine extensions forcing an answer's length, for every endpoint."""
    min_tokens = optional(body, "min_tokens", int) or 0
    if min_tokens < 0:
        raise InvalidRequest("min_tokens must be >= 0", param="min_tokens")
    return min_tokens, optional(body, "ignore_eos", bool) or False


def optional(body: dict, key: str, kind: type):
    value = body.get(key)
    if value is None:
        return None
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise InvalidRequest(f"'{key}' must be of type {kind.__name__}", param=key)
    return value


def positive_int(body: dict, key: str) -> int | None:
    value = optional(body, key, int)
    if value is not None and value < 1:
        raise InvalidRequest(f"'{key}' must be >= 1", param=key)
    return value


def _messages(body: dict) -> list[dict]:
    messages = body.get("messages")
    if messages is None:
        raise InvalidRequest("'messages' is required", param="messages")
    if not isinstance(messages, list) or not messages:
        raise InvalidRequest("'messages' must be a non-empty array", param="messages")
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise InvalidRequest(f"messages[{i}] must be an object with a string 'role'", param="messages")
    return messages


def _message_text(index: int, message: dict) -> str:
    """The text a message's tokens are counted over (llmreplay.wire.message_text), after checking its types."""
    content = message.get("content")
    if content is not None and not isinstance(content, str | list):
        raise InvalidRequest(f"messages[{index}].content must be a string or an array", param="messages")
    for part in content if isinstance(content, list) else ():
        if not isinstance(part, dict):
            raise InvalidRequest(f"messages[{index}].content parts must be objects", param="messages")
        if part.get("type") == "text" and not isinstance(part.get("text"), str):
            raise InvalidRequest(f"messages[{index}].content text part needs 'text'", param="messages")
    for call in message.get("tool_calls") or ():
        if not isinstance(call, dict) or not isinstance(call.get("function"), dict):
            raise InvalidRequest(f"messages[{index}].tool_calls entries need 'function'", param="messages")
    return message_text(message)[1]


def _tools(body: dict, messages: list[dict]) -> tuple[tuple[str, ...], str | None]:
    """Tool definitions as one prompt text, and the function to call (None: answer with text): a named
    function -> it, else `chosen_tool`'s rule."""
    offered = offered_tools(body, _function_name)
    if offered is None:
        return (), None
    texts, names = offered
    choice = body.get("tool_choice", "auto" if names else "none")
    if isinstance(choice, dict):
        function = choice.get("function")
        name = function.get("name") if isinstance(function, dict) else None
        if name not in names:
            raise InvalidRequest(f"tool_choice names an unknown function: {name!r}", param="tool_choice")
        return texts, name
    if choice not in TOOL_CHOICE_MODES:
        raise InvalidRequest("'tool_choice' must be none, auto, required or a function", param="tool_choice")
    return texts, chosen_tool(choice, names, messages[-1].get("role") == "user")


def _function_name(index: int, tool) -> str:
    function = tool.get("function") if isinstance(tool, dict) else None
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise InvalidRequest(
            f"tools[{index}] must be {{'type': 'function', 'function': {{'name': ...}}}}", param="tools"
        )
    return function["name"]


def offered_tools(
    body: dict, name_of: Callable[[int, object], str | None]
) -> tuple[tuple[str, ...], list[str]] | None:
    """(the `tools` array's JSON as one prompt text, the callable names), None without tools;
    `name_of(index, tool)` names one (None: a tool the sim cannot call), raising InvalidRequest."""
    tools = body.get("tools")
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise InvalidRequest("'tools' must be an array", param="tools")
    names = [name for i, tool in enumerate(tools) if (name := name_of(i, tool)) is not None]
    return ((orjson.dumps(tools).decode(),) if tools else ()), names


def chosen_tool(mode: str, names: list[str], from_user: bool) -> str | None:
    """The tool called under a choice mode: "required" -> the first; "auto" -> the first when the last
    message is the user's, text otherwise (after a tool result the model answers in words, like a
    typical agent loop); "none" -> text."""
    if not names or mode == "none":
        return None
    return names[0] if mode == "required" or from_user else None


def _prompt(body: dict) -> tuple[tuple[str, ...], tuple[int, ...] | None]:
    prompt = body.get("prompt")
    if prompt is None:
        raise InvalidRequest("'prompt' is required", param="prompt")
    if isinstance(prompt, str):
        return (prompt,), None
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
        prompt = prompt[0]
        if isinstance(prompt, str):
            return (prompt,), None
    if isinstance(prompt, list) and all(
        isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in prompt
    ):
        return (), tuple(prompt)
    raise InvalidRequest(
        "'prompt' must be a string or token ids (one prompt per request in the sim)", param="prompt"
    )
