"""Production's side of a run's prefix-cache checks, read from the trace the run replayed: per request
its prompt, cached and cache-write tokens, whether it succeeded, its arrival and its first prefix-block
hash (replayer.judge.run_fidelity judges them). Only these columns are read, in batches: a content
trace's text never is, and of the prefix hashes only the first is kept."""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from llmreplay.errors import BadInput, first_line
from llmreplay.metrics import success_mask
from llmreplay.run_format import RunInfo
from llmreplay.trace_arrow import float_values
from llmreplay.trace_io import read_meta, trace_files

COLUMNS = (
    "request_id",
    "arrival_time",
    "error_kind",
    "http_status",
    "prompt_tokens",
    "cached_tokens",
    "cache_write_tokens",  # trace format 1.3 on: absent before, read as unknown
    "prefix_block_hashes",
)
BATCH_ROWS = 65_536


@dataclass(frozen=True, slots=True)
class TraceCache:
    """Per trace row (NaN where unknown); `note` says why production's facts are missing, if they are."""

    request_id: np.ndarray  # object (str)
    success: np.ndarray
    arrival_us: np.ndarray  # int64 microseconds
    prompt_tokens: np.ndarray
    cached_tokens: np.ndarray
    cache_write_tokens: np.ndarray
    first_block_hash: np.ndarray  # int64; meaningful where has_hash
    has_hash: np.ndarray
    note: str | None = None


def trace_cache(
    request_id,
    success,
    arrival_us,
    prompt_tokens,
    cached_tokens,
    cache_write_tokens=None,
    first_block_hash=None,
) -> TraceCache:
    """A TraceCache from plain sequences (None for an unknown value or a request without prefix hashes)."""
    n = len(request_id)
    hashes = [None] * n if first_block_hash is None else list(first_block_hash)
    return TraceCache(
        request_id=np.asarray(request_id, dtype=object),
        success=np.asarray(success, dtype=bool),
        arrival_us=np.asarray(arrival_us, dtype=np.int64),
        prompt_tokens=_nan(prompt_tokens),
        cached_tokens=_nan(cached_tokens),
        cache_write_tokens=_nan([None] * n if cache_write_tokens is None else cache_write_tokens),
        first_block_hash=np.asarray([0 if h is None else h for h in hashes], dtype=np.int64),
        has_hash=np.asarray([h is not None for h in hashes], dtype=bool),
    )


def unknown(note: str) -> TraceCache:
    """No request known: the check says why (`note`)."""
    return TraceCache(*_empty(), note=note)


def _empty() -> list[np.ndarray]:
    return [np.empty(0, dtype=t) for t in (object, bool, np.int64, float, float, float, np.int64, bool)]


def run_trace_cache(info: RunInfo | None) -> TraceCache | None:
    """The TraceCache of the trace a run's run.json names (None when it names none)."""
    path = None if info is None else info.trace.path
    return read_trace_cache(path) if isinstance(path, str) and path else None


def read_trace_cache(path: str | os.PathLike) -> TraceCache:
    """The trace at `path`, its metadata checked (version, schema); a trace that is gone or unreadable
    gives an empty TraceCache whose note says so (the check then says production's share is unknown)."""
    try:
        parts = [_read_file(file) for file in trace_files(path)]
    except BadInput as exc:
        return unknown(f"trace unreadable: {exc}")
    return TraceCache(*(np.concatenate([p[i] for p in parts]) for i in range(8)))


def _read_file(file) -> list[np.ndarray]:
    read_meta(file)  # a readable llmreplay trace of a version this llmreplay reads, else BadInput
    try:
        handle = pq.ParquetFile(file, pre_buffer=False)
        present = [c for c in COLUMNS if c in handle.schema_arrow.names]
        chunks = [
            _facts(pa.Table.from_batches([b])) for b in handle.iter_batches(BATCH_ROWS, columns=present)
        ]
    except (pa.ArrowException, OSError) as exc:
        raise BadInput(f"{file}: corrupt Parquet data ({first_line(exc)})") from None
    if not chunks:
        return _empty()
    return [np.concatenate([c[i] for c in chunks]) for i in range(8)]


def _facts(table: pa.Table) -> list[np.ndarray]:
    hashes = table.column("prefix_block_hashes")
    lengths = np.asarray(pc.fill_null(pc.list_value_length(hashes), 0).to_numpy(zero_copy_only=False))
    has_hash = lengths > 0
    first = np.zeros(table.num_rows, dtype=np.int64)
    first[has_hash] = np.asarray(
        pc.list_flatten(pc.list_slice(hashes, 0, 1)).to_numpy(zero_copy_only=False), dtype=np.int64
    )
    nan = np.full(table.num_rows, np.nan)
    return [
        np.asarray(table.column("request_id").to_pylist(), dtype=object),
        success_mask(table),
        _floats(pc.cast(table.column("arrival_time"), pa.int64())).astype(np.int64),
        _floats(table.column("prompt_tokens")),
        _floats(table.column("cached_tokens")),
        _floats(table.column("cache_write_tokens")) if "cache_write_tokens" in table.column_names else nan,
        first,
        has_hash,
    ]


_floats = float_values


def _nan(values) -> np.ndarray:
    return np.asarray([np.nan if v is None else v for v in values], dtype=float)
