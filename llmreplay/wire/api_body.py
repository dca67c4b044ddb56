"""How an API lays out what a chat body carries (the write rules): one ApiBody per API, in its module
(`BODY`), held by its DIALECTS row. Pure; the replayer and preflight build bodies with it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

ANSWER_SCHEMA = {"type": "object", "properties": {"answer": {"type": "string"}}}


@dataclass(frozen=True, slots=True)
class ApiBody:
    """How one API spells what a chat body carries; `chat` gives the chat view the engine templates."""

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


def forced_choice(choice: object, free: tuple) -> bool:
    """A body's tool_choice forces a call: neither absent nor one of the API's `free` modes."""
    if isinstance(choice, dict):
        return choice.get("type") not in free
    return choice not in (None, *free)
