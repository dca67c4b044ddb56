"""Prompt text from a shape: block i is spelled from a seed equal to its chained hash (or one unique to
the request without a hash), so prompts share exactly the prefixes they shared in production. Words
come from a single-token WordSource (llmreplay.exact_text), so counts stay exact."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from llmreplay.trace_format import MessageShape
from replayer.plan.schedule import unit_hash


class WordSource(Protocol):
    def words(self, seed: int, count: int) -> list[str]:
        """`count` single-token words, deterministic in `seed`; any run of them joins to exactly
        as many tokens as words."""
        ...


CACHE_WORDS = 4096 * 512  # the blocks' words kept (each a reference into the vocabulary): ~20 MB


class BlockSpeller:
    """Spells prompt blocks; caches each block's words because shared prefixes repeat a lot."""

    def __init__(self, source: WordSource, block_size: int, cache_words: int = CACHE_WORDS):
        self.source = source
        self.block_size = block_size
        self._cache: dict[int, list[str]] = {}
        self._cache_blocks = max(1, cache_words // block_size)

    def block_words(self, seed: int) -> list[str]:
        words = self._cache.get(seed)
        if words is None:
            words = self.source.words(seed, self.block_size)
            if len(self._cache) >= self._cache_blocks:
                self._cache.pop(next(iter(self._cache)))
            self._cache[seed] = words
        return words

    def messages(
        self,
        shapes: Sequence[MessageShape],
        prompt_tokens: int,
        block_hashes: Sequence[int],
        request_key: str,
        nonce: int,
        correction: int = 0,
    ) -> list[tuple[str, str]]:
        """(role, text) per message. No message shapes -> one user message of `prompt_tokens`.

        `correction` tokens are added to the last message (taken from earlier ones when negative).
        """
        if not shapes:
            shapes = (MessageShape("user", prompt_tokens),)
        if correction:
            shapes = corrected(shapes, correction)
        size = self.block_size
        position = 0
        out = []
        last = len(shapes) - 1
        for index, shape in enumerate(shapes):
            pieces: list[str] = []
            remaining = shape.tokens
            while remaining > 0:
                block, within = divmod(position, size)
                take = min(remaining, size - within)
                if block >= len(block_hashes):
                    seed = unit_hash(0, request_key, str(block))
                elif take == remaining and within + take < size and index < last:
                    seed = message_end_seed(block_hashes, block, position + take)
                else:
                    seed = block_hashes[block]
                pieces.extend(self.block_words(seed ^ nonce)[within : within + take])
                position += take
                remaining -= take
            out.append((shape.role, "".join(pieces)))
        return out

    def text(self, tokens: int, key: str, nonce: int) -> str:
        """Stand-alone text of `tokens` tokens, shared by nothing else (tool and schema fillers)."""
        words: list[str] = []
        block = 0
        while len(words) < tokens:
            words.extend(self.block_words(unit_hash(0, key, f"t{block}") ^ nonce))
            block += 1
        return "".join(words[:tokens])


def message_end_seed(block_hashes: Sequence[int], block: int, end: int) -> int:
    """The seed of a message's last words in a block that runs on into the next message: the block's
    hash names the next message's start too, so prompts sharing a whole message (a system prompt) would
    differ in its last words; the hash before the block and where the message ends name them instead.
    Two messages of one length whose last block differs share those words too: at most one block."""
    previous = block_hashes[block - 1] if block else 0
    return unit_hash(previous, "message-end", str(end))


def corrected(shapes: Sequence[MessageShape], correction: int) -> list[MessageShape]:
    """The shapes with `correction` tokens added at the end (removed from the end when negative)."""
    out = list(shapes)
    if correction > 0:
        out[-1] = MessageShape(out[-1].role, out[-1].tokens + correction)
        return out
    owed = -correction
    for i in range(len(out) - 1, -1, -1):
        take = min(owed, out[i].tokens)
        out[i] = MessageShape(out[i].role, out[i].tokens - take)
        owed -= take
    return out


class ExactTextWords:
    """WordSource over llmreplay.exact_text: block seed -> the same words ExactText.blocks spells."""

    def __init__(self, tokenizer):
        """`tokenizer`: a loaded llmreplay.tokenizers.Tokenizer, or a `--tokenizer` spec (None: the default)."""
        from llmreplay.exact_text import ExactText
        from llmreplay.tokenizers import load_tokenizer

        if tokenizer is None or isinstance(tokenizer, str):
            tokenizer = load_tokenizer(tokenizer)
        self._exact = ExactText(tokenizer)
        self.tokenizer_id = self._exact.tokenizer_id

    def words(self, seed: int, count: int) -> list[str]:
        vocabulary = self._exact.vocabulary
        key = (seed & _MASK_63).to_bytes(8, "little")
        return [vocabulary[i] for i in self._exact.word_indices(count, key)]


_MASK_63 = (1 << 63) - 1


def copy_nonce(copy_index: int, seed: int) -> int:
    """Copy k >= 1 of a session spells every block differently from copy 0 (and from copy j != k)."""
    return 0 if copy_index == 0 else unit_hash(seed, "copy-nonce", str(copy_index)) & _MASK_63
