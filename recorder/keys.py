"""The recorder's secret key: kept in a 0600 file outside the trace, never written into one.

It keys the prefix-block hashes and the hashes of API keys and user ids, so a shape trace
cannot be reversed by hashing guesses.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from llmreplay.key_files import check_key_strength, create_key_file, hex_digits, read_key_file

BLAKE2B_MAX_KEY_BYTES = 64


def load_or_create_key(path: str | os.PathLike) -> bytes:
    """The key of the file at `path` (llmreplay.key_files policy), created when it does not exist.

    Hex text is decoded (the form the recorder writes); other content is used as bytes. A key longer
    than BLAKE2b takes is hashed down to 64 bytes.
    """
    path = Path(path).expanduser()
    if not path.exists():
        create_key_file(path)
    data = check_key_strength(read_key_file(path), path)
    digits = hex_digits(data)
    key = bytes.fromhex(digits) if digits is not None else data
    return key if len(key) <= BLAKE2B_MAX_KEY_BYTES else hashlib.blake2b(key).digest()


def keyed_hash(key: bytes, value: str, prefix: str) -> str:
    """A stable pseudonym for `value` (API key, user id) that only the key holder can recompute."""
    digest = hashlib.blake2b(
        value.encode("utf-8", "surrogatepass"), digest_size=12, key=key, person=prefix.encode()[:16]
    )
    return f"{prefix}-{digest.hexdigest()}"
