"""An LRU set of prompt prefix blocks, keyed by chained block hashes (llmreplay.prefix_hash).

Because hash i covers every token up to block i, a hit on hash i implies the whole prefix is cached.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence


class PrefixCache:
    """Sized in blocks; only full blocks are cached (a partial last block is always recomputed)."""

    __slots__ = ("capacity_blocks", "_blocks")

    def __init__(self, capacity_blocks: int):
        self.capacity_blocks = capacity_blocks
        self._blocks: OrderedDict[int, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._blocks)

    def hit_blocks(self, full_block_hashes: Sequence[int]) -> int:
        """How many leading blocks are cached; refreshes them in the LRU order."""
        hits = 0
        blocks = self._blocks
        for block_hash in full_block_hashes:
            if block_hash not in blocks:
                break
            blocks.move_to_end(block_hash)
            hits += 1
        return hits

    def insert(self, full_block_hashes: Sequence[int]) -> None:
        """Remember the blocks of a prefilled prompt, evicting the least recently used ones."""
        if self.capacity_blocks == 0:
            return
        blocks = self._blocks
        for block_hash in full_block_hashes:
            blocks[block_hash] = None
            blocks.move_to_end(block_hash)
        while len(blocks) > self.capacity_blocks:
            blocks.popitem(last=False)
