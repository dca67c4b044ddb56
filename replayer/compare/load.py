"""Load over time: requests/s, output tokens/s, in-flight requests, error rate and TTFT per window.

Both sides share one axis in trace seconds (a side's own clock times its speed), so a 2x replay
lines up with the production hour it replays; rates stay per second of the side's own clock.
"""

from __future__ import annotations

import numpy as np

from replayer.measured.requests import RequestColumns

NICE_WINDOWS_S = (0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 14400)
TARGET_WINDOWS = 60
INFLIGHT_SAMPLES_PER_WINDOW = 8


def window_width_s(span_trace_s: float) -> float:
    """The smallest nice width giving at most TARGET_WINDOWS windows."""
    for width in NICE_WINDOWS_S:
        if span_trace_s / width <= TARGET_WINDOWS:
            return float(width)
    return float(np.ceil(span_trace_s / TARGET_WINDOWS / 3600) * 3600)


def trace_span_s(requests: RequestColumns, scale: float) -> float:
    if not requests.sent.any():
        return 0.0
    return float(np.nanmax(requests.end_ns[requests.sent]) * scale / 1e9)


def load_windows(requests: RequestColumns, scale: float, width_trace_s: float, count: int) -> dict:
    """Per-window series for one side, as lists (JSON-ready); index i covers [i*w, (i+1)*w) trace seconds."""
    width_own_ns = width_trace_s / scale * 1e9
    sent = requests.sent
    start = requests.start_ns[sent]
    end = requests.end_ns[sent]
    index = np.minimum((start // width_own_ns).astype(np.int64), count - 1)
    started = np.bincount(index, minlength=count)
    counted = requests.counted[sent]
    errors = np.bincount(index, weights=(counted & ~requests.success[sent]).astype(float), minlength=count)
    base = np.bincount(index, weights=counted.astype(float), minlength=count)
    done = requests.success[sent]
    end_index = np.minimum((end // width_own_ns).astype(np.int64), count - 1)
    tokens = np.where(done, np.nan_to_num(requests.completion_tokens[sent]), 0.0)
    output_tokens = np.bincount(end_index, weights=tokens, minlength=count)
    width_own_s = width_own_ns / 1e9
    inflight_mean, inflight_max = _inflight(start, end, width_own_ns, count)
    ttft = requests.latency_ns["ttft"][sent]
    return {
        "requests_per_s": (started / width_own_s).tolist(),
        "output_tokens_per_s": (output_tokens / width_own_s).tolist(),
        "inflight_mean": inflight_mean.tolist(),
        "inflight_max": inflight_max.tolist(),
        "error_rate": [float(e / b) if b else None for e, b in zip(errors, base, strict=True)],
        "ttft_p50_ms": _per_window_percentile(ttft, index, count, 50),
        "ttft_p99_ms": _per_window_percentile(ttft, index, count, 99),
    }


def _inflight(
    start: np.ndarray, end: np.ndarray, width_ns: float, count: int
) -> tuple[np.ndarray, np.ndarray]:
    """Open requests sampled at evenly spaced instants inside each window (mean and max of the samples)."""
    samples = (np.arange(count * INFLIGHT_SAMPLES_PER_WINDOW) + 0.5) * (
        width_ns / INFLIGHT_SAMPLES_PER_WINDOW
    )
    opened = np.searchsorted(np.sort(start), samples, side="right")
    closed = np.searchsorted(np.sort(end), samples, side="right")
    open_now = (opened - closed).reshape(count, INFLIGHT_SAMPLES_PER_WINDOW)
    return open_now.mean(axis=1), open_now.max(axis=1)


def _per_window_percentile(values_ns: np.ndarray, index: np.ndarray, count: int, q: float) -> list:
    out: list[float | None] = [None] * count
    finite = np.isfinite(values_ns)
    if not finite.any():
        return out
    order = np.argsort(index[finite], kind="stable")
    sorted_index = index[finite][order]
    sorted_values = values_ns[finite][order]
    bounds = np.searchsorted(sorted_index, np.arange(count + 1))
    for i in range(count):
        chunk = sorted_values[bounds[i] : bounds[i + 1]]
        if chunk.size:
            out[i] = float(np.percentile(chunk, q) / 1e6)
    return out
