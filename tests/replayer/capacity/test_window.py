"""The busiest stretch, the warm-up before it, production's peak minute: tiny hand-checkable offsets."""

import numpy as np

from replayer.capacity.window import busiest_stretch, peak_minute, warmup_before

S = 1_000_000_000


def test_busiest_stretch_by_requests_ties_to_the_earliest():
    offsets = np.array([0, 1, 2, 10, 10.5, 11, 20, 21, 21.5]) * S
    window = busiest_stretch(offsets.astype(np.int64), 2 * S)
    assert (window.start_ns, window.end_ns, window.requests) == (10 * S, 12 * S, 3)


def test_zero_or_longer_than_the_trace_is_the_whole_trace():
    offsets = np.array([0, 5, 9]) * S
    for length in (0, 60 * S):
        window = busiest_stretch(offsets, length)
        assert window.whole_trace and window.requests == 3 and window.start_ns == 0


def test_warmup_is_capped_at_the_trace_start():
    offsets = np.array([0, 1, 2, 3, 4]) * S
    window = busiest_stretch(offsets, 2 * S)
    assert warmup_before(offsets, window, 60 * S) == (0, 0)
    late = busiest_stretch(np.array([0, 1, 2, 3, 3.2, 3.4]).astype(float) * S, 1 * S)
    assert warmup_before(np.array([0, 1, 2, 3, 3.2, 3.4]) * S, late, int(1.5 * S)) == (int(1.5 * S), 1)


def test_peak_minute_counts_requests_and_output_tokens():
    offsets = np.concatenate([np.arange(0, 60, 6), np.arange(100, 160, 1)]) * S
    tokens = np.full(offsets.size, 10.0)
    peak = peak_minute(offsets, tokens)
    assert peak.start_ns == 100 * S and peak.requests_per_s == 1.0 and peak.output_tokens_per_s == 10.0
