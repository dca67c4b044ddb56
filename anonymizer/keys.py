"""The anonymization key: load (length and permission checks) or generate, and keyed re-mapping.

Ids and prefix hashes are re-keyed with HMAC-SHA256 under subkeys derived from the secret key, so
the mapping cannot be reversed or rebuilt without it. The key itself is never returned or logged.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import secrets
import stat
from dataclasses import dataclass, field
from pathlib import Path

from llmreplay.errors import BadInput

MIN_KEY_BYTES = 32
_MASK_63 = (1 << 63) - 1
_ID_HEX_CHARS = 24  # 96 bits: collisions between re-keyed ids are out of reach


_ID_DIGEST_FORM = f"[0-9a-f]{{{_ID_HEX_CHARS}}}"
ANY_REKEYED_ID = re.compile(r"\b[a-z]+[_-]" + _ID_DIGEST_FORM + r"\b")  # any prefix, inside any text


def rekeyed_id_pattern(prefix: str) -> re.Pattern[str]:
    """The form of every id `Rekeyer.id` returns: the prefix and a bare keyed digest, nothing else."""
    return re.compile(re.escape(prefix) + _ID_DIGEST_FORM)


def load_key(path: Path) -> bytes:
    """The key file's bytes, used as-is; refuses short keys and files others may read."""
    try:
        info = path.stat()
    except OSError as exc:
        raise BadInput(f"--key-file {path}: cannot read ({exc.strerror})") from None
    if not stat.S_ISREG(info.st_mode):
        raise BadInput(f"--key-file {path}: not a regular file")
    if info.st_mode & 0o077:
        raise BadInput(
            f"--key-file {path}: permissions {stat.S_IMODE(info.st_mode):04o} let others read it "
            f"(need 0600 or stricter: chmod 600 {path})"
        )
    key = path.read_bytes()
    if len(key) < MIN_KEY_BYTES:
        raise BadInput(f"--key-file {path}: {len(key)} bytes, need at least {MIN_KEY_BYTES}")
    return key


def generate_key_file(path: Path) -> bytes:
    """Create `path` (mode 0600, never overwriting) holding 256 random bits as hex; return its bytes."""
    key = secrets.token_hex(MIN_KEY_BYTES).encode()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise BadInput(f"--key-file {path}: already exists") from None
    except OSError as exc:
        raise BadInput(f"--key-file {path}: cannot create ({exc.strerror})") from None
    with os.fdopen(fd, "wb") as handle:
        handle.write(key)
    return key


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
