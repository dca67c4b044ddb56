"""The busiest stretch of the trace to replay, the warm-up before it, and production's busiest minute.

Pure numpy over arrival offsets (ns from the trace's first request); no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

PEAK_MINUTE_NS = 60_000_000_000


@dataclass(frozen=True, slots=True)
class Window:
    """[start_ns, end_ns) on the trace's clock and the requests in it."""

    start_ns: int
    end_ns: int
    requests: int
    whole_trace: bool

    @property
    def length_ns(self) -> int:
        return self.end_ns - self.start_ns


def busiest_stretch(offsets_ns: np.ndarray, length_ns: int) -> Window:
    """The [t, t + length) holding the most requests, t an arrival (ties: the earliest); a length of 0
    or longer than the trace is the whole trace."""
    offsets = np.sort(np.asarray(offsets_ns, dtype=np.int64))
    span = int(offsets[-1] - offsets[0]) if offsets.size else 0
    if length_ns <= 0 or length_ns > span:
        return Window(
            int(offsets[0]) if offsets.size else 0,
            int(offsets[-1]) + 1 if offsets.size else 1,
            int(offsets.size),
            True,
        )
    ends = np.searchsorted(offsets, offsets + length_ns, side="left")  # two pointers, vectorised
    counts = ends - np.arange(offsets.size)
    best = int(np.argmax(counts))  # argmax: the first of equal counts
    start = int(offsets[best])
    return Window(start, start + int(length_ns), int(counts[best]), False)


def warmup_before(offsets_ns: np.ndarray, window: Window, warmup_ns: int) -> tuple[int, int]:
    """(start_ns, requests) of the warm-up: `warmup_ns` before the window, capped at the trace's start."""
    start = max(0, window.start_ns - max(0, int(warmup_ns)))
    offsets = np.asarray(offsets_ns, dtype=np.int64)
    return start, int(((offsets >= start) & (offsets < window.start_ns)).sum())


@dataclass(frozen=True, slots=True)
class Peak:
    """Production's busiest minute: its start and its request and output-token rates."""

    start_ns: int
    requests_per_s: float
    output_tokens_per_s: float


def peak_minute(offsets_ns: np.ndarray, output_tokens: np.ndarray) -> Peak:
    """The busiest 60 s by requests (a shorter trace: its whole span, at least 1 s), and its output tokens/s."""
    order = np.argsort(offsets_ns, kind="stable")
    offsets = np.asarray(offsets_ns, dtype=np.int64)[order]
    tokens = np.nan_to_num(np.asarray(output_tokens, dtype=float)[order])
    span = int(offsets[-1] - offsets[0]) if offsets.size else 0
    length = min(PEAK_MINUTE_NS, max(span, 1_000_000_000))
    ends = np.searchsorted(offsets, offsets + length, side="left")
    counts = ends - np.arange(offsets.size)
    best = int(np.argmax(counts))
    seconds = length / 1e9
    cumulative = np.concatenate([[0.0], np.cumsum(tokens)])
    return Peak(
        int(offsets[best]),
        float(counts[best]) / seconds,
        float(cumulative[ends[best]] - cumulative[best]) / seconds,
    )
