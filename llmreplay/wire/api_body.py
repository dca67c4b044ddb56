"""How an API lays out what a chat body carries (the write rules): one ApiBody per API, in its module
(`BODY`), held by its DIALECTS row. Pure; the replayer and preflight build bodies with it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

ANSWER_SCHEMA = {"type": "object", "properties": {"answer": {"type": "string"}}}
# The replayer's ways of building a body (replayer.plan.request_builder.BUILDERS): chat messages a
# session continues, a text prompt, an embedding input, or whatever `spell` lays out (a new API's way).
BUILDERS = ("chat", "prompt", "embedding", "spelled")


def _free(body: dict) -> bool:
    return False


@dataclass(frozen=True, slots=True)
class ApiBody:
    """How one API spells what a chat body carries; `chat` gives the chat view the engine templates."""

    endpoint: str
    builder: str  # of BUILDERS
    prompt_field: str  # where the conversation goes (its prompt_column holds this field's value)
    spell: Callable[[Sequence[tuple[str, str]]], dict]  # (role, text) -> prompt (and system) fields
    chat: Callable[[Sequence[tuple[str, str]]], list[dict]]  # spelled -> the chat messages it templates as
    under_grammar: Callable[[dict], bool] = _free  # the body's answer is grammar-constrained
    limit_field: str = "max_tokens"  # the output length limit
    limit_required: bool = False  # a body without a limit is refused: send one even when none was recorded
    system_field: str | None = None  # where the system prompt goes (content_system holds this field's value)
    tool: Callable[[str, str, dict], dict] | None = None  # (name, description, JSON schema) -> a definition
    tool_name: Callable[[dict], str | None] | None = None  # a tool definition's name
    tool_choice: Callable[[str, str], object] | None = None  # (the trace's TOOL_CHOICES value, first tool)
    formats: Callable[[str, str], dict | None] | None = None  # (structured_output kind, description) -> format
    format_fields: Callable[[dict], dict] | None = None  # the API's own format object -> the fields holding it
    sampling: tuple[str, ...] = ()  # the trace's SAMPLING_COLUMNS the API has
    asks_usage: bool = False  # a stream reports its usage only when asked (stream_options.include_usage)
    prompt_column: str = "content_messages"  # the trace's content column for it (or content_prompt)
    prompt_as_sent: bool = False  # a prompt field that is no array is recorded as sent, not as []


def forced_choice(choice: object, free: tuple) -> bool:
    """A body's tool_choice forces a call: neither absent nor one of the API's `free` modes."""
    if isinstance(choice, dict):
        return choice.get("type") not in free
    return choice not in (None, *free)
