"""The anonymization key: load (length and permission checks) or generate, and keyed re-mapping.

Ids and prefix hashes are re-keyed with HMAC-SHA256 under subkeys derived from the secret key, so
the mapping cannot be reversed or rebuilt without it. The key itself is never returned or logged.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import dataclass, field
from pathlib import Path

from llmreplay.key_files import MIN_KEY_BYTES, check_key_strength, create_key_file, read_key_file

__all__ = ["MIN_KEY_BYTES", "Rekeyer", "generate_key_file", "load_key"]
_MASK_63 = (1 << 63) - 1
_ID_HEX_CHARS = 24  # 96 bits: collisions between re-keyed ids are out of reach


_ID_DIGEST_FORM = f"[0-9a-f]{{{_ID_HEX_CHARS}}}"
ANY_REKEYED_ID = re.compile(r"\b[a-z]+[_-]" + _ID_DIGEST_FORM + r"\b")  # any prefix, inside any text


def rekeyed_id_pattern(prefix: str) -> re.Pattern[str]:
    """The form of every id `Rekeyer.id` returns: the prefix and a bare keyed digest, nothing else."""
    return re.compile(re.escape(prefix) + _ID_DIGEST_FORM)


def load_key(path: Path) -> bytes:
    """The key file's bytes, used as-is, under the one key-file policy (llmreplay.key_files)."""
    return check_key_strength(read_key_file(path), path)


def generate_key_file(path: Path) -> bytes:
    """Create `path` (mode 0600, never overwriting) holding 256 random bits as hex; return its bytes."""
    return create_key_file(path)


@dataclass(frozen=True)
class Rekeyer:
    """Keyed, deterministic re-mapping of ids, prefix hashes and text seeds (one per secret key)."""

    key: bytes = field(repr=False)
    _subkeys: dict[str, bytes] = field(default_factory=dict, repr=False, compare=False)

    def subkey(self, label: str) -> bytes:
        """A 32-byte key for one purpose, so ids of different kinds never map to each other."""
        found = self._subkeys.get(label)
        if found is None:
            found = self._subkeys[label] = hmac.digest(
                self.key, b"llmreplay-anonymize/" + label.encode(), "sha256"
            )
        return found

    def id(self, kind: str, value: str | None, prefix: str) -> str | None:
        """`prefix` + 96 hex bits of HMAC(subkey(kind), value); None stays None."""
        if value is None:
            return None
        return prefix + hmac.digest(self.subkey(kind), value.encode(), "sha256").hex()[:_ID_HEX_CHARS]

    def block_hash(self, value: int, scope: bytes = b"") -> int:
        """A prefix-block hash re-keyed as a positive int64; equal (scope, value) -> equal output."""
        digest = hmac.digest(self.subkey("block"), scope + value.to_bytes(8, "little", signed=True), "sha256")
        return int.from_bytes(digest[:8], "little") & _MASK_63

    def seed(self, label: str, data: bytes) -> bytes:
        """A secret 16-byte seed for generated text (keyed BLAKE2b: a MAC, faster than HMAC)."""
        return hashlib.blake2b(data, digest_size=16, key=self.subkey(label)).digest()
