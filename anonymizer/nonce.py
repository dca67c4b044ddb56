"""Nonce-breaking of prefix sharing: preserve (none added), session (one per session), none (one per request).

A nonce is a fixed number of words laid over the first words of the prompt, so token counts stay
exact; in shape traces the same scopes re-key the prefix-block hashes instead.
"""

from __future__ import annotations

from anonymizer.config import MODES
from anonymizer.fakes import Fakes


def nonce_scope(mode: str, request_id: str, session_id: str | None) -> bytes | None:
    """What the nonce is a function of: nothing (preserve), the session, or the request."""
    if mode == "preserve":
        return None
    if mode == "session":
        return b"session\0" + (session_id if session_id is not None else "request\0" + request_id).encode()
    if mode == "none":
        return b"request\0" + request_id.encode()
    raise ValueError(f"unknown prefix-sharing mode {mode!r} (known: {', '.join(MODES)})")


def nonce_words(fakes: Fakes, scope: bytes, nonce_tokens: int) -> list[str]:
    """The nonce as words (each one token, with its leading space)."""
    text = fakes.exact.text(nonce_tokens, fakes.rekeyer.seed("nonce", scope))
    return [" " + word for word in text.split(" ")[1:]]


class BlockHashRekeyer:
    """Re-keys prefix_block_hashes lists, remembering recent results (hashes repeat across turns)."""

    def __init__(self, fakes: Fakes, max_entries: int = 250_000):
        self._rekeyer = fakes.rekeyer
        self._memo: dict[tuple[bytes, int], int] = {}
        self._max_entries = max_entries

    def rekey(self, hashes: list[int] | None, scope: bytes | None) -> list[int] | None:
        """HMAC of each hash (and of the scope, if any): equal inputs stay equal, nothing else links."""
        if hashes is None:
            return None
        scope = scope or b""
        memo = self._memo
        if len(memo) > self._max_entries:
            memo.clear()  # bounded memory; results are deterministic, so clearing changes nothing
        out = []
        for value in hashes:
            found = memo.get((scope, value))
            if found is None:
                found = memo[(scope, value)] = self._rekeyer.block_hash(value, scope)
            out.append(found)
        return out
