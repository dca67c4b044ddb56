"""Deterministic text of exactly n tokens under a given tokenizer (anonymized and synthesized prompts).

Text is a run of words, each one token with its leading space and checked not to merge with its
neighbours, so n words are n tokens: Faker's words first, then the tokenizer's own word tokens.
"""

from __future__ import annotations

import hashlib
import importlib
import pkgutil
import random
import struct
import threading
from collections.abc import Sequence

from llmreplay.errors import BadInput
from llmreplay.tokenizers import Tokenizer

MAX_VOCABULARY_WORDS = 4096  # a power of two, so 16 random bits pick a word without bias
MIN_VOCABULARY_WORDS = 1024  # below this, chance collisions between unrelated texts get too likely
_WORDS_PER_DIGEST = 32  # a 64-byte BLAKE2b digest holds 32 little-endian uint16 indices
_UNPACK_DIGEST = struct.Struct(f"<{_WORDS_PER_DIGEST}H").unpack
_VERIFY_SHUFFLES = 4
_SPARE_WORDS = 512  # own words taken beyond the need, for those the merge check drops

_vocabularies: dict[tuple[str, str], tuple[tuple[str, ...], tuple[int, ...]]] = {}
_vocabularies_lock = threading.Lock()


def faker_words() -> tuple[str, ...]:
    """Every lowercase ASCII word of Faker's lorem word lists (all locales), sorted, no duplicates."""
    import faker.providers.lorem as lorem

    found: set[str] = set()
    for module in pkgutil.iter_modules(lorem.__path__):
        provider = importlib.import_module(f"{lorem.__name__}.{module.name}").Provider
        found.update(
            w for w in getattr(provider, "word_list", ()) if len(w) >= 2 and w.isascii() and w.isalpha()
        )
    return tuple(sorted(w for w in found if w.islower()))


def single_token_vocabulary(
    tokenizer: Tokenizer, words: Sequence[str]
) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """The words (with a leading space) that are one token each and concatenate without merging.

    `words` are preferred; the tokenizer's own word tokens fill the rest, so any vocabulary of 32k
    or more entries yields a full set. Every word is checked against the tokenizer. Returns (words, ids).
    """
    preferred = _single_tokens(tokenizer, words)
    vocabulary = {}
    if len(preferred) < MAX_VOCABULARY_WORDS:
        own = (w for w in _hash_order(vocabulary_words(tokenizer)) if " " + w not in preferred)
        vocabulary = _single_tokens(
            tokenizer, own, limit=MAX_VOCABULARY_WORDS - len(preferred) + _SPARE_WORDS
        )
    single = preferred | vocabulary
    # A fixed pseudo-random order spreads the kept words over all sources (not just "a..d").
    ordered = _hash_order(preferred) + _hash_order(vocabulary)
    kept = _drop_merging_words(tokenizer, ordered, single)
    size = MAX_VOCABULARY_WORDS
    while size > len(kept):
        size //= 2
    if size < MIN_VOCABULARY_WORDS:
        raise BadInput(
            f"tokenizer {tokenizer.id}: only {len(kept)} words (Faker's and its own) are single tokens that "
            f"do not merge (need {MIN_VOCABULARY_WORDS}); exact-length text cannot be built for it"
        )
    chosen = tuple(kept[:size])
    return chosen, tuple(single[w] for w in chosen)


def vocabulary_words(tokenizer: Tokenizer) -> list[str]:
    """The tokenizer's tokens that decode to a lowercase ASCII word (leading space stripped).

    A tokenizer that cannot list its vocabulary (an engine's, over HTTP) is offered the default
    tokenizer's words instead, to test in bulk.
    """
    if tokenizer.vocab_size() == 0:
        from llmreplay.tokenizers import load_tokenizer

        return vocabulary_words(load_tokenizer())
    found = set()
    for token_id in range(tokenizer.vocab_size()):
        try:
            word = tokenizer.decode([token_id]).strip(" ")
        except Exception:  # noqa: BLE001 (special or unused ids some tokenizers refuse to decode alone)
            continue
        if len(word) >= 2 and word.isascii() and word.isalpha() and word.islower():
            found.add(word)
    return sorted(found)


def _single_tokens(tokenizer: Tokenizer, words, limit: int | None = None) -> dict[str, int]:
    """ " word" -> its id, for the words that encode to one token and decode back to themselves."""
    if hasattr(tokenizer, "single_token_words"):  # checked in bulk by the tokenizer itself
        found = tokenizer.single_token_words(words)
        return dict(list(found.items())[:limit]) if limit is not None else found
    single: dict[str, int] = {}
    for word in words:
        ids = tokenizer.encode(" " + word)
        # SentencePiece-style decoders drop the leading space of a text's first token.
        if len(ids) == 1 and tokenizer.decode(ids).lstrip(" ") == word:
            single[" " + word] = ids[0]
            if limit is not None and len(single) >= limit:
                break
    return single


def _hash_order(words) -> list[str]:
    return sorted(words, key=lambda w: hashlib.blake2b(w.encode(), digest_size=8).digest())


def _drop_merging_words(tokenizer: Tokenizer, ordered: list[str], ids: dict[str, int]) -> list[str]:
    kept = list(ordered)
    rng = random.Random(0)  # fixed: the vocabulary must be the same on every machine
    for _ in range(_VERIFY_SHUFFLES):
        while True:
            order = kept[:]
            rng.shuffle(order)
            actual = tokenizer.encode("".join(order))
            expected = [ids[w] for w in order]
            if actual == expected:
                break
            at = next(
                (i for i, (a, e) in enumerate(zip(actual, expected, strict=False)) if a != e),
                len(expected) - 1,
            )
            # The mismatch is caused by the word at `at` or its left neighbour; drop both to be safe.
            for word in order[max(0, at - 1) : at + 1]:
                kept.remove(word)
    return kept


class ExactText:
    """Generator of deterministic text with an exact token count; thread-safe, cheap to call.

    `text(n, seed)` is a function of (n, seed) only, and `text(n, seed)` is a prefix of
    `text(m, seed)` for n <= m. Different seeds pick their first word from a hash of the seed, so
    two texts share their first token with probability 1/V and their first k with (1/V)**k
    (V = vocabulary size, normally 4096).
    """

    def __init__(self, tokenizer: Tokenizer, words: Sequence[str] | None = None):
        source = tuple(words) if words is not None else faker_words()
        fingerprint = hashlib.blake2b("\n".join(source).encode(), digest_size=8).hexdigest()
        cache_key = (tokenizer.id, fingerprint)
        with _vocabularies_lock:
            if cache_key not in _vocabularies:
                _vocabularies[cache_key] = single_token_vocabulary(tokenizer, source)
            self.vocabulary, self.token_ids_of_words = _vocabularies[cache_key]
        self.tokenizer_id = tokenizer.id
        self.vocabulary_id = hashlib.blake2b("".join(self.vocabulary).encode(), digest_size=8).hexdigest()
        self._mask = len(self.vocabulary) - 1

    def word_indices(self, n_tokens: int, seed: bytes) -> list[int]:
        """Indices into the vocabulary of the n words of `text(n_tokens, seed)`."""
        if n_tokens < 0:
            raise ValueError(f"n_tokens must be >= 0, got {n_tokens}")
        mask, unpack, blake2b = self._mask, _UNPACK_DIGEST, hashlib.blake2b
        indices: list[int] = []
        counter = 0
        while len(indices) < n_tokens:
            digest = blake2b(seed, digest_size=64, salt=counter.to_bytes(16, "little")).digest()
            indices += [i & mask for i in unpack(digest)]
            counter += 1
        del indices[n_tokens:]
        return indices

    def text(self, n_tokens: int, seed: bytes) -> str:
        """Exactly `n_tokens` tokens of words, each with a leading space ("" for 0)."""
        vocabulary = self.vocabulary
        return "".join([vocabulary[i] for i in self.word_indices(n_tokens, seed)])

    def token_ids(self, n_tokens: int, seed: bytes) -> list[int]:
        """The token ids of `text(n_tokens, seed)`, without encoding it."""
        ids = self.token_ids_of_words
        return [ids[i] for i in self.word_indices(n_tokens, seed)]

    def blocks(self, hashes: Sequence[int], block_size: int, total_tokens: int) -> str:
        """A prompt of exactly `total_tokens` tokens whose block i is a function of hashes[i] only.

        Equal hash prefixes therefore give equal text prefixes (chained prefix hashes as in
        llmreplay.prefix_hash); the last block may be partial, as in the trace format.
        """
        if block_size <= 0 or total_tokens < 0:
            raise ValueError(
                f"block_size must be > 0 and total_tokens >= 0, got {block_size}, {total_tokens}"
            )
        needed = -(-total_tokens // block_size)
        if len(hashes) != needed:
            raise ValueError(
                f"{total_tokens} tokens in blocks of {block_size} need {needed} hashes, got {len(hashes)}"
            )
        parts = []
        for i, block_hash in enumerate(hashes):
            n = min(block_size, total_tokens - i * block_size)
            parts.append(self.text(n, int(block_hash).to_bytes(8, "little", signed=True)))
        return "".join(parts)
