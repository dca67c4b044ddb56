"""The one policy for secret key files (`record --key-file`, `anonymize --key-file`).

A key file is a regular file of mode 0600 or stricter holding at least 256 bits (64+ hex digits, or
32+ bytes of anything else); new ones hold 64 random hex digits, created exclusively with mode 0600.
What each command takes from it differs, and stays so (README, "Key"): `record` decodes hex text
(BLAKE2b keys are at most 64 bytes), `anonymize` keys HMAC with the file's exact bytes; changing either
would re-map every hash already made with an existing key.
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

from llmreplay.errors import BadInput

KEY_BITS = 256
MIN_KEY_BYTES = KEY_BITS // 8
MAX_KEY_FILE_BYTES = 4096  # a key, not a document: anything larger is the wrong file


def read_key_file(path: str | os.PathLike, flag: str = "--key-file") -> bytes:
    """The bytes of the key file at `path`, after the type and permission checks."""
    path = Path(path).expanduser()
    try:
        info = path.stat()
    except OSError as exc:
        raise BadInput(f"{flag} {path}: cannot read ({exc.strerror})") from None
    if not stat.S_ISREG(info.st_mode):
        raise BadInput(f"{flag} {path}: not a regular file")
    if info.st_mode & 0o077:
        raise BadInput(
            f"{flag} {path}: permissions {stat.S_IMODE(info.st_mode):04o} let others read it "
            f"(need 0600 or stricter: chmod 600 {path})"
        )
    if info.st_size > MAX_KEY_FILE_BYTES:
        raise BadInput(f"{flag} {path}: {info.st_size} bytes, not a key file (at most {MAX_KEY_FILE_BYTES})")
    try:
        return path.read_bytes()
    except OSError as exc:
        raise BadInput(f"{flag} {path}: cannot read ({exc.strerror})") from None


def create_key_file(path: str | os.PathLike, flag: str = "--key-file") -> bytes:
    """Create `path` (and its directory) holding a new random key; return the file's bytes."""
    path = Path(path).expanduser()
    data = (secrets.token_hex(MIN_KEY_BYTES) + "\n").encode()
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise BadInput(f"{flag} {path}: already exists") from None
    except OSError as exc:
        raise BadInput(f"{flag} {path}: cannot create ({exc.strerror})") from None
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
    except OSError as exc:
        path.unlink(missing_ok=True)
        raise BadInput(f"{flag} {path}: cannot write ({exc.strerror})") from None
    return data


def check_key_strength(data: bytes, path: str | os.PathLike, flag: str = "--key-file") -> bytes:
    """Refuse a key of fewer than 256 bits: hex text needs 64+ digits, anything else 32+ bytes."""
    digits = hex_digits(data)
    if digits is not None and len(digits) < MIN_KEY_BYTES * 2:
        raise BadInput(
            f"{flag} {path}: {len(digits)} hex digits ({len(digits) * 4} bits), need at least "
            f"{MIN_KEY_BYTES * 2} ({KEY_BITS} bits)"
        )
    if digits is None and len(data) < MIN_KEY_BYTES:
        raise BadInput(f"{flag} {path}: {len(data)} bytes, need at least {MIN_KEY_BYTES} ({KEY_BITS} bits)")
    return data


def hex_digits(data: bytes) -> str | None:
    """The key file's text when it is an even number of hex digits (surrounding space ignored)."""
    try:
        text = data.decode("ascii").strip()
    except UnicodeDecodeError:
        return None
    if not text or len(text) % 2 or any(c not in "0123456789abcdefABCDEF" for c in text):
        return None
    return text
