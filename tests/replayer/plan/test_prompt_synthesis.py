"""A message shared whole (a system prompt) is spelled whole, though its last block runs on into the next
message, whose hashes differ (replayer.plan.prompt_synthesis.message_end_seed)."""

from __future__ import annotations

from llmreplay.prefix_hash import prefix_block_hashes
from llmreplay.trace_format import MessageShape
from replayer.plan.prompt_synthesis import BlockSpeller

BLOCK = 16


class Words:
    """Word i of a seed's block: distinct per seed, one token each by construction."""

    def words(self, seed: int, count: int) -> list[str]:
        return [f" w{seed % 100_000}_{i}" for i in range(count)]


def _spelled(system: list[int], user: list[int]) -> list[tuple[str, str]]:
    shapes = (MessageShape("system", len(system)), MessageShape("user", len(user)))
    hashes = prefix_block_hashes([*system, *user], BLOCK)
    return BlockSpeller(Words(), BLOCK).messages(shapes, len(system) + len(user), hashes, "r", 0)


def test_a_system_prompt_shared_whole_is_spelled_whole():
    system = list(range(1000, 1037))  # 37 tokens: its last 5 share a block with the user message
    a = _spelled(system, list(range(5000, 5020)))
    b = _spelled(system, list(range(7000, 7030)))
    assert a[0] == b[0] and len(a[0][1].split()) == 37  # all 37 words, the 5 of the mixed block too
    assert a[1] != b[1]


def test_a_system_prompt_shared_in_part_shares_whole_blocks_only():
    a = _spelled(list(range(1000, 1037)), list(range(5000, 5020)))
    b = _spelled([*range(1000, 1020), *range(3000, 3017)], list(range(5000, 5020)))  # same length, differs at 20
    words_a, words_b = a[0][1].split(), b[0][1].split()
    assert words_a[:16] == words_b[:16] and words_a[16:32] != words_b[16:32]
