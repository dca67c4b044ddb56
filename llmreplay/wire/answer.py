"""A whole (non-streamed) answer as every dialect reduces it: text, reasoning, chat-shaped tool calls,
chat's finish reason, normalised usage."""

from __future__ import annotations

from dataclasses import dataclass

from llmreplay.wire.usage import Usage


@dataclass(frozen=True, slots=True)
class Answer:
    text: str = ""
    reasoning_text: str = ""
    tool_calls: tuple[dict, ...] = ()  # [{"id", "type": "function", "function": {"name", "arguments"}}]
    finish_reason: str | None = None  # stop | length | tool_calls | content_filter | ...
    usage: Usage = Usage()
    response_id: str | None = None
