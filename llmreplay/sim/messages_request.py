"""Parse and validate an Anthropic Messages body (/v1/messages) at the edge, into the sim's CompletionRequest.

Prompt texts: the tools' JSON, then `system` and every message's text-bearing blocks in order
(llmreplay.wire.messages_api.request_messages). `max_tokens` is required, as Anthropic's API has it.
"""

from __future__ import annotations

from llmreplay.sim.openai_request import (
    CompletionRequest,
    InvalidRequest,
    chosen_tool,
    json_object,
    length_extensions,
    offered_tools,
    optional,
    positive_int,
)
from llmreplay.wire.messages_api import request_messages

ROLES = ("user", "assistant")
TOOL_CHOICE_TYPES = {"auto": "auto", "any": "required", "tool": "tool", "none": "none"}  # -> chat's mode


def parse_messages(raw: bytes) -> CompletionRequest:
    body = json_object(raw)
    if body.get("max_tokens") is None:
        raise InvalidRequest("max_tokens: Field required", param="max_tokens")
    max_tokens = positive_int(body, "max_tokens")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise InvalidRequest("messages: must be a non-empty array", param="messages")
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in ROLES:
            raise InvalidRequest(
                f"messages.{i}: must be an object with role user or assistant", param="messages"
            )
        content = message.get("content")
        blocks = content if isinstance(content, list) else ()
        if not isinstance(content, str | list) or any(not isinstance(block, dict) for block in blocks):
            raise InvalidRequest(
                f"messages.{i}.content: must be a string or an array of blocks", param="messages"
            )
    system = body.get("system")
    if system is not None and not isinstance(system, str | list):
        raise InvalidRequest("system: must be a string or an array of text blocks", param="system")
    min_tokens, ignore_eos = length_extensions(body)
    tool_texts, tool_name = _tools(body, messages)
    texts = (*tool_texts, *(message.text for message in request_messages(body)))
    return CompletionRequest(
        "messages", optional(body, "model", str), optional(body, "stream", bool) or False, True, texts, None,
        len(texts) - len(tool_texts), max_tokens, min_tokens, ignore_eos, tool_name,
        optional(body, "cache_salt", str),
    )  # fmt: skip


def _tools(body: dict, messages: list[dict]) -> tuple[tuple[str, ...], str | None]:
    """Tool definitions as one prompt text, and the tool to use: `tool` -> the named one, else chat's
    rule (openai_request.chosen_tool, `any` as required; a user turn of tool_result blocks answers in words)."""
    offered = offered_tools(body, _tool_name)
    if offered is None:
        return (), None
    texts, names = offered
    choice = body.get("tool_choice") or {"type": "auto"}
    kind = choice.get("type") if isinstance(choice, dict) else None
    if kind not in TOOL_CHOICE_TYPES:
        raise InvalidRequest("tool_choice: type must be auto, any, tool or none", param="tool_choice")
    if kind == "tool":
        if choice.get("name") not in names:
            raise InvalidRequest(
                f"tool_choice names an unknown tool: {choice.get('name')!r}", param="tool_choice"
            )
        return texts, choice["name"]
    last = messages[-1]
    content = last.get("content")
    answered = isinstance(content, list) and any(block.get("type") == "tool_result" for block in content)
    return texts, chosen_tool(TOOL_CHOICE_TYPES[kind], names, last["role"] == "user" and not answered)


def _tool_name(index: int, tool) -> str:
    if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
        raise InvalidRequest(f"tools.{index}: must be an object with a 'name'", param="tools")
    return tool["name"]
