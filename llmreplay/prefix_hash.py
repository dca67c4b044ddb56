"""Chained prefix-block hashes: hash i covers every token from the start to the end of block i.

Equal hash at position i therefore means an equal prefix of (i + 1) blocks, as with Mooncake's
`hash_ids`. The last, partial block gets a hash too, so len == ceil(tokens / block_size).
Keyed (BLAKE2b with a secret key) so a shape trace cannot be reversed by hashing guesses.
"""

from __future__ import annotations

import hashlib
from array import array
from collections.abc import Sequence

_MASK_63 = (1 << 63) - 1


def block_count(tokens: int, block_size: int) -> int:
    return -(-tokens // block_size)


def prefix_block_hashes(token_ids: Sequence[int], block_size: int, key: bytes = b"") -> list[int]:
    """Chained hashes of the token sequence, one per (possibly partial) block, as positive int64."""
    hashes: list[int] = []
    append, from_bytes = hashes.append, int.from_bytes
    keyed = hashlib.blake2b(digest_size=8, key=key)  # keyed once; a copy per block is cheaper than a new key
    data = array("I", token_ids).tobytes()  # packed once: 4 bytes a token
    step = 4 * block_size
    previous = b""
    for start in range(0, len(data), step):
        block = keyed.copy()
        block.update(previous + data[start : start + step])
        previous = block.digest()
        append(from_bytes(previous, "little") & _MASK_63)
    return hashes


def shared_prefix_blocks(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading blocks two chained-hash lists share (equal hash = equal prefix)."""
    shared = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        shared += 1
    return shared
