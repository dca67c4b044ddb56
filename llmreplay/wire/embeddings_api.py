"""Embeddings (/v1/embeddings): an `input` and nothing generated; every reader is chat's (READS_AS).
Pure, light imports."""

from __future__ import annotations

from collections.abc import Sequence

from llmreplay.wire import chat_api
from llmreplay.wire.api_body import ApiBody
from llmreplay.wire.chat_api import chat_view

READS_AS = chat_api  # its answer generates nothing: chat's reading finds nothing in it


def spell(spelled: Sequence[tuple[str, str]]) -> dict:
    return {"input": "".join(text for _, text in spelled)}


BODY = ApiBody(
    "embeddings",
    builder="embedding",
    prompt_field="input",
    prompt_column="content_prompt",
    spell=spell,
    chat=chat_view,
)
