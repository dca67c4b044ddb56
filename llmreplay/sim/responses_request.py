"""Parse and validate a Responses API body (/v1/responses) at the edge, into the sim's CompletionRequest.

Prompt texts: the tools' JSON, then `instructions` and every input item's text in order
(llmreplay.wire.responses_api.request_messages); a chained turn's history goes after the instructions.
"""

from __future__ import annotations

from llmreplay.sim.openai_request import (
    TOOL_CHOICE_MODES,
    CompletionRequest,
    InvalidRequest,
    chosen_tool,
    json_object,
    length_extensions,
    offered_tools,
    optional,
    positive_int,
)
from llmreplay.wire.responses_api import request_messages

# Request fields a Response object repeats (with their defaults when the request leaves them out).
ECHOED = {"instructions": None, "max_output_tokens": None, "previous_response_id": None, "tools": [],
          "tool_choice": "auto", "store": True, "text": {"format": {"type": "text"}}}  # fmt: skip


def parse_responses(raw: bytes) -> CompletionRequest:
    body = json_object(raw)
    items = body.get("input")
    if items is None:
        raise InvalidRequest("'input' is required", param="input")
    if not isinstance(items, str | list) or not items:
        raise InvalidRequest("'input' must be a non-empty string or array of items", param="input")
    for i, item in enumerate(items if isinstance(items, list) else ()):
        if not isinstance(item, dict):
            raise InvalidRequest(f"input[{i}] must be an object", param="input")
    instructions = optional(body, "instructions", str)
    if body.get("conversation") is not None:
        raise InvalidRequest(
            "the sim keeps no conversations: chain with previous_response_id", param="conversation"
        )
    previous = optional(body, "previous_response_id", str)
    min_tokens, ignore_eos = length_extensions(body)
    tool_texts, tool_name = _tools(body, items)
    texts = (*tool_texts, *(message.text for message in request_messages(body)))
    echo = {key: body.get(key, default) for key, default in ECHOED.items()}
    return CompletionRequest(
        "responses", optional(body, "model", str), optional(body, "stream", bool) or False, True, texts,
        None, len(texts) - len(tool_texts), positive_int(body, "max_output_tokens"), min_tokens, ignore_eos,
        tool_name, optional(body, "cache_salt", str), previous, len(tool_texts) + (instructions is not None),
        optional(body, "store", bool) is not False, echo,
    )  # fmt: skip


def _tools(body: dict, items: str | list) -> tuple[tuple[str, ...], str | None]:
    """Tool definitions as one prompt text, and the function to call: a named one, else chat's rule
    (openai_request.chosen_tool: after a function_call_output the model answers in words)."""
    offered = offered_tools(body, _function_name)
    if offered is None:
        return (), None
    texts, names = offered
    choice = body.get("tool_choice", "auto")
    if isinstance(choice, dict):
        if choice.get("type") == "allowed_tools":
            choice = choice.get("mode", "auto")
        elif choice.get("type") == "function":
            if choice.get("name") not in names:
                name = choice.get("name")
                raise InvalidRequest(f"tool_choice names an unknown function: {name!r}", param="tool_choice")
            return texts, choice["name"]
        else:
            return texts, None  # a built-in tool forced: the sim runs none, it answers in words
    if choice not in TOOL_CHOICE_MODES:
        raise InvalidRequest("'tool_choice' must be none, auto, required or a function", param="tool_choice")
    last = items if isinstance(items, str) else items[-1]
    from_user = isinstance(last, str) or (
        last.get("type") in (None, "message") and last.get("role") == "user"
    )
    return texts, chosen_tool(choice, names, from_user)


def _function_name(index: int, tool) -> str | None:
    """A function tool's name; None for a built-in tool (web_search, ...), which the sim never calls."""
    if not isinstance(tool, dict) or not isinstance(tool.get("type"), str):
        raise InvalidRequest(f"tools[{index}] must be an object with a 'type'", param="tools")
    if tool["type"] != "function":
        return None
    if not isinstance(tool.get("name"), str):
        raise InvalidRequest(f"tools[{index}] is a function without a 'name'", param="tools")
    return tool["name"]
