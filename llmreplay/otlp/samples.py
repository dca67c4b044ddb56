"""A run's measurements per GenAI metric (semconv.METRICS): each value, its series and when it was
recorded (the request's last byte), by the rules the docs state; pure numpy over the run's columns.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from llmreplay.otlp import semconv
from llmreplay.otlp.run_requests import RunRequests
from llmreplay.trace_arrow import float_values

NS_PER_S = 1_000_000_000


@dataclass(frozen=True, slots=True)
class Samples:
    """One metric's measurements: value, the series it belongs to, and when it was recorded (Unix ns)."""

    values: np.ndarray
    series: np.ndarray
    at_ns: np.ndarray


def run_samples(run: RunRequests) -> dict[str, tuple[Samples, list[dict]]]:
    """Metric name -> its samples and series attributes (the semconv's rules: see semconv.METRICS)."""
    table, ok, series = run.table, run.ok, run.series
    streamed = ok & _bools(table.column("stream"))
    ttft = float_values(table.column("ttft_ns"))
    e2e = (run.end_ns - run.start_ns) / NS_PER_S
    found = {
        semconv.DURATION.name: (Samples(e2e, series, run.end_ns), run.series_attributes),
        semconv.TIME_TO_FIRST_CHUNK.name: (
            _where(streamed & np.isfinite(ttft), ttft / NS_PER_S, series, run.end_ns),
            run.series_attributes,
        ),
        semconv.TOKEN_USAGE.name: _token_samples(run),
    }
    gaps, rows = chunk_gaps(table.column("chunk_offsets_ns"))
    keep = streamed[rows]
    found[semconv.TIME_PER_OUTPUT_CHUNK.name] = (
        Samples(gaps[keep] / NS_PER_S, series[rows[keep]], run.end_ns[rows[keep]]),
        run.series_attributes,
    )
    return found


def _token_samples(run: RunRequests) -> tuple[Samples, list[dict]]:
    """Input and output tokens of the successful requests: series 2k (input) and 2k+1 (output) of series k."""
    parts = []
    for kind, column in enumerate(("prompt_tokens", "completion_tokens")):
        tokens = float_values(run.table.column(column))
        parts.append(_where(run.ok & np.isfinite(tokens), tokens, run.series * 2 + kind, run.end_ns))
    samples = Samples(
        *(np.concatenate([getattr(p, f) for p in parts]) for f in ("values", "series", "at_ns"))
    )
    attributes = [
        {**attrs, semconv.TOKEN_TYPE: kind} for attrs in run.series_attributes for kind in semconv.TOKEN_TYPES
    ]
    return samples, attributes


def chunk_gaps(lists: pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """(gap ns, row) for each gap between consecutive chunk offsets within one row."""
    lists = lists.combine_chunks()
    lengths = np.asarray(pc.fill_null(pc.list_value_length(lists), 0).to_numpy(zero_copy_only=False))
    flat = np.asarray(pc.list_flatten(lists).to_numpy(zero_copy_only=False), dtype=np.float64)
    rows = np.repeat(np.arange(len(lengths)), lengths)
    same_row = rows[1:] == rows[:-1]
    return np.diff(flat)[same_row], rows[1:][same_row]


def _where(mask: np.ndarray, values: np.ndarray, series: np.ndarray, at_ns: np.ndarray) -> Samples:
    return Samples(values[mask], series[mask], at_ns[mask])


def _bools(column) -> np.ndarray:
    return np.asarray(pc.fill_null(column, False).to_numpy(zero_copy_only=False), dtype=bool)
