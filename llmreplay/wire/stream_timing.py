"""From a stream's token-chunk stamps to its first-token times and reasoning share: one rule for both sides.

TTFT: the first chunk carrying tokens on any channel. TTFO: the first answer chunk. Reasoning time:
TTFT to TTFO (to the last chunk when no answer came). Offsets are ns from the request's start.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class StreamTiming:
    ttft_ns: int | None = None
    ttfo_ns: int | None = None
    reasoning_ns: int | None = None
    reasoning_tokens: int | None = None


def stream_timing(
    offsets_ns: Sequence[int], first_answer: int | None, reasoning_chunks: int, usage_reasoning: int | None
) -> StreamTiming:
    """`first_answer`: index of the first answer chunk in `offsets_ns` (None: no answer). Reasoning
    tokens are the usage's, else one a reasoning chunk (engines stream a token a chunk)."""
    if not offsets_ns:
        return StreamTiming(reasoning_tokens=usage_reasoning if usage_reasoning is not None else 0)
    ttft = offsets_ns[0]
    ttfo = offsets_ns[first_answer] if first_answer is not None else None
    reasoning_ns = 0
    if reasoning_chunks:
        reasoning_ns = (ttfo if ttfo is not None else offsets_ns[-1]) - ttft
    tokens = usage_reasoning if usage_reasoning is not None else reasoning_chunks
    return StreamTiming(ttft, ttfo, reasoning_ns, tokens)
