"""Prompt token count and prefix blocks of a request, from the project's tokenizer.

Rendering (documented contract): token ids of the tool definitions (their JSON, when tools are
offered), then of each message's text in order, each message preceded by `message_overhead_tokens`
fixed filler ids (default 0, so synthesized prompts count exactly); a chained Responses turn's stored
history goes after its tools and instructions. CPU-bound: run it off the loop.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

from llmreplay.prefix_hash import prefix_block_hashes
from llmreplay.sim.openai_request import CompletionRequest
from llmreplay.tokenizers import Tokenizer

OVERHEAD_TOKEN_ID = 1


@dataclass(frozen=True, slots=True)
class PromptShape:
    prompt_tokens: int
    full_block_hashes: tuple[int, ...]  # chained hashes of the full blocks only
    conversation_ids: tuple[int, ...] = ()  # a stored Responses answer's: the ids after tools + instructions


def prompt_token_ids(
    tokenizer: Tokenizer,
    request: CompletionRequest,
    message_overhead_tokens: int,
    history_ids: Sequence[int] = (),
) -> list[int]:
    return _rendered(tokenizer, request, message_overhead_tokens, history_ids)[0]


def _rendered(
    tokenizer: Tokenizer, request: CompletionRequest, message_overhead_tokens: int, history_ids: Sequence[int]
) -> tuple[list[int], int]:
    """(the prompt's token ids, where its history starts in them)."""
    if request.prompt_token_ids is not None:
        return list(request.prompt_token_ids), 0
    ids: list[int] = []
    history_start = 0
    tool_texts = len(request.prompt_texts) - request.message_count
    for i, encoded in enumerate(tokenizer.encode_batch(list(request.prompt_texts))):
        if i == request.history_after:
            history_start = len(ids)
            ids.extend(history_ids)
        if i >= tool_texts:
            ids.extend([OVERHEAD_TOKEN_ID] * message_overhead_tokens)
        ids.extend(encoded)
    if request.history_after >= len(request.prompt_texts):  # no new text after the history
        history_start = len(ids)
        ids.extend(history_ids)
    return ids, history_start


def prompt_shape(
    tokenizer: Tokenizer,
    request: CompletionRequest,
    block_size: int,
    message_overhead_tokens: int,
    history_ids: Sequence[int] = (),
) -> PromptShape:
    ids, history_start = _rendered(tokenizer, request, message_overhead_tokens, history_ids)
    conversation = tuple(ids[history_start:]) if request.store else ()
    full = len(ids) - len(ids) % block_size
    hashes = prefix_block_hashes(ids[:full], block_size)
    if request.cache_salt:  # as vLLM: the salt joins the first block's hash, so the whole chain
        salt = int.from_bytes(
            hashlib.blake2b(request.cache_salt.encode(), digest_size=8).digest(), "little", signed=True
        )
        hashes = [h ^ salt for h in hashes]
    return PromptShape(len(ids), tuple(hashes), conversation)
