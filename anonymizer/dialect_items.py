"""What each API's prompt items are counted over, by trace endpoint: its dialect's own rule
(llmreplay.wire), so the anonymizer keeps exactly the lengths the recorder measured."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from llmreplay.wire.dialects import dialect_for


def item_text(endpoint: str | None) -> Callable[[Any], tuple[str, str]]:
    """The counting rule of `endpoint`'s items; chat's for any other (the recorder's default)."""
    return dialect_for(endpoint or "").item_text


def system_message(system: Any) -> dict:
    """content_system (Responses `instructions`, Anthropic `system`: a string or blocks) as the
    prompt's first item, counted by the same rule as the items."""
    return {"role": "system", "content": system}
