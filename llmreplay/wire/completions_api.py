"""Text completions (/v1/completions): a `prompt` instead of messages; every other reader and write
rule is chat's (READS_AS). Pure, light imports."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from llmreplay.wire import chat_api
from llmreplay.wire.message_text import PromptMessage

READS_AS = chat_api  # every reader this module lacks is chat's


def request_messages(body: dict) -> tuple[PromptMessage, ...]:
    """A completions `prompt` (a string or a list of strings) as one user message."""
    prompt = body.get("prompt")
    if isinstance(prompt, list):
        prompt = "\n".join(p for p in prompt if isinstance(p, str))
    return (PromptMessage("user", prompt),) if isinstance(prompt, str) else ()


def spell(spelled: Sequence[tuple[str, str]]) -> dict:
    return {"prompt": "".join(text for _, text in spelled)}


# Chat's body without tools: a text prompt, the length, format, streaming and sampling fields
BODY = replace(
    chat_api.BODY,
    endpoint="completions",
    builder="prompt",
    prompt_field="prompt",
    prompt_column="content_prompt",
    spell=spell,
    tool=None,
    tool_name=None,
    tool_choice=None,
)
