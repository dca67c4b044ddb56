"""The recorder's secret key: kept in a 0600 file outside the trace, never written into one.

It keys the prefix-block hashes and the hashes of API keys and user ids, so a shape trace
cannot be reversed by hashing guesses.
"""

from __future__ import annotations

import hashlib
import os
import secrets
from pathlib import Path

from llmreplay.errors import BadInput

KEY_BYTES = 32


def load_or_create_key(path: str | os.PathLike) -> bytes:
    """Read the hex key at `path`, or create it (0600, atomically) when the file does not exist."""
    path = Path(path).expanduser()
    if not path.exists():
        _create_key(path)
    try:
        text = path.read_text().strip()
        key = bytes.fromhex(text)
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise BadInput(
            f"--key-file {path}: unreadable key ({type(exc).__name__}); expected {KEY_BYTES * 2} hex digits"
        ) from None
    if not 16 <= len(key) <= 64:
        raise BadInput(
            f"--key-file {path}: key must be 16 to 64 bytes (32 to 128 hex digits), got {len(key)} bytes"
        )
    return key


def _create_key(path: Path) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(secrets.token_hex(KEY_BYTES) + "\n")
        os.replace(tmp, path)
    except OSError as exc:
        raise BadInput(f"--key-file {path}: cannot create key file ({exc.strerror})") from None


def keyed_hash(key: bytes, value: str, prefix: str) -> str:
    """A stable pseudonym for `value` (API key, user id) that only the key holder can recompute."""
    digest = hashlib.blake2b(
        value.encode("utf-8", "surrogatepass"), digest_size=12, key=key, person=prefix.encode()[:16]
    )
    return f"{prefix}-{digest.hexdigest()}"
