"""Snake_case names of an exact token count, built from the generator's vocabulary words.

A name of n tokens is one head word (one token on its own) and n - 1 tails ("_word", one token
each). Built this way rather than by trial, so every key gets exact names, not most keys.
"""

from __future__ import annotations

import hashlib
import struct
import threading

from llmreplay.exact_text import ExactText
from llmreplay.tokenizers import Tokenizer

_INDICES_PER_DIGEST = 16  # a 64-byte digest holds 16 little-endian uint32 indices
_UNPACK_DIGEST = struct.Struct(f"<{_INDICES_PER_DIGEST}I").unpack

_parts: dict[tuple[str, str], tuple[tuple[str, ...], tuple[str, ...]]] = {}
_parts_lock = threading.Lock()


def identifier_parts(tokenizer: Tokenizer, exact: ExactText) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(heads, tails): vocabulary words that are one token alone, and "_word" pieces of one token.

    Drawn from the generator's vocabulary, so names hold only words the leak check knows as
    generator words. Cached per tokenizer and vocabulary.
    """
    cache_key = (tokenizer.id, exact.vocabulary_id)
    with _parts_lock:
        found = _parts.get(cache_key)
        if found is None:
            words = [w.strip() for w in exact.vocabulary]
            found = _parts[cache_key] = (
                tuple(w for w in words if _one_token(tokenizer, w)),
                tuple("_" + w for w in words if _one_token(tokenizer, "_" + w)),
            )
    return found


def _one_token(tokenizer: Tokenizer, text: str) -> bool:
    ids = tokenizer.encode(text)
    return len(ids) == 1 and tokenizer.decode(ids) == text


class IdentifierWords:
    """Deterministic snake_case names: `name(n, seed)` is a function of (n, seed) only."""

    def __init__(self, tokenizer: Tokenizer, exact: ExactText):
        self.heads, self.tails = identifier_parts(tokenizer, exact)

    def name(self, n_tokens: int, seed: bytes) -> str:
        """A head and n_tokens - 1 tails; "" for 0 tokens.

        Exact for tokenizers that split words at "_" (tiktoken, tekken); callers still check the
        count, because a tokenizer without that split may merge pieces.
        """
        if n_tokens <= 0 or not self.heads:
            return ""
        indices = self._indices(n_tokens, seed)
        if not self.tails:  # no one-token tails: fall back to words joined by "_" (count checked)
            return "_".join(self.heads[i % len(self.heads)] for i in indices)
        head = self.heads[indices[0] % len(self.heads)]
        return head + "".join(self.tails[i % len(self.tails)] for i in indices[1:])

    @staticmethod
    def _indices(count: int, seed: bytes) -> list[int]:
        indices: list[int] = []
        counter = 0
        while len(indices) < count:
            digest = hashlib.blake2b(seed, digest_size=64, salt=counter.to_bytes(16, "little")).digest()
            indices.extend(_UNPACK_DIGEST(digest))
            counter += 1
        return indices[:count]
