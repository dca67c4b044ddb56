"""What each API's prompt items are counted over, by trace endpoint: the dialects' own rules
(llmreplay.wire), so the anonymizer keeps exactly the lengths the recorder measured."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from llmreplay.wire.message_text import message_text
from llmreplay.wire.messages_api import blocks_text
from llmreplay.wire.responses_api import item_message


def _responses_item(item: Any) -> tuple[str, str]:
    found = item_message(item)
    return ("unknown", "") if found is None else (found.role, found.text)


def _anthropic_message(message: Any) -> tuple[str, str]:
    if not isinstance(message, dict):
        return "unknown", ""
    role = message.get("role") if isinstance(message.get("role"), str) else "unknown"
    return role, blocks_text(message.get("content"))


# endpoint -> (role, counted text) of one item of its content_messages array
ITEM_TEXT: dict[str, Callable[[Any], tuple[str, str]]] = {
    "chat_completions": message_text,
    "responses": _responses_item,
    "messages": _anthropic_message,
}


def item_text(endpoint: str | None) -> Callable[[Any], tuple[str, str]]:
    """The counting rule of `endpoint`'s items; chat's for any other (the recorder's default)."""
    return ITEM_TEXT.get(endpoint or "", message_text)


def system_message(system: Any) -> dict:
    """content_system (Responses `instructions`, Anthropic `system`: a string or blocks) as the
    prompt's first item, counted by the same rule as the items."""
    return {"role": "system", "content": system}
