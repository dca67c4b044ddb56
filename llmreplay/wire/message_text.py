"""What text a chat message's tokens are counted over: one definition for every stage (the recorder,
the anonymizer, the sim and the sample generator); the rule is `message_text`'s."""

from __future__ import annotations

from typing import Any, NamedTuple


class PromptMessage(NamedTuple):
    """One prompt message as every dialect reduces it: its role and the text its tokens are counted over."""

    role: str
    text: str


def content_text(content: Any) -> str:
    """Text of a message's content: a string, or the text parts of a list joined by newlines."""
    return content if isinstance(content, str) else "\n".join(text_parts(content))


def text_parts(content: Any) -> list[str]:
    """The texts that content_text joins, in order: the string, or each text part of a list."""
    if isinstance(content, str):
        return [content]
    if not isinstance(content, list):
        return []
    return [
        part if isinstance(part, str) else part["text"]
        for part in content
        if isinstance(part, str) or (isinstance(part, dict) and isinstance(part.get("text"), str))
    ]


def message_text(message: Any) -> tuple[str, str]:
    """(role, the text whose tokens are the message's tokens): its text content (a string, or the text
    parts of a list joined by "\\n"; images, audio and other parts count nothing) followed directly by
    each tool call's function name and arguments. A Responses API `function_call` item counts name +
    arguments, a `function_call_output` its output. A prompt's tokens are its messages' tokens
    concatenated, with no chat template."""
    if not isinstance(message, dict):
        return "unknown", ""
    kind = message.get("type")
    if kind == "function_call":
        return "assistant", f"{message.get('name') or ''}{message.get('arguments') or ''}"
    if kind == "function_call_output":
        return "tool", str(message.get("output") or "")
    role = message.get("role") if isinstance(message.get("role"), str) else "unknown"
    parts = [content_text(message.get("content"))]
    calls = message.get("tool_calls")
    for call in calls if isinstance(calls, list) else ():
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            parts.append(f"{function.get('name') or ''}{function.get('arguments') or ''}")
    return role, "".join(parts)


def call_text(call: dict) -> str:
    """A tool call's counted text: function name then arguments (a Responses item holds them itself)."""
    function = call.get("function") if isinstance(call.get("function"), dict) else call
    return f"{function.get('name') or ''}{function.get('arguments') or ''}"
