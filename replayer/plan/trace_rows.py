"""The few scalar columns of a trace a replay plans with (~150 bytes a row), and full rows streamed back
only where bodies are built: the coordinator never holds every TraceRecord through a run
(docs/design/replay-memory.md)."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from llmreplay.trace_arrow import trace_schema
from llmreplay.trace_format import CONTENT_COLUMN_NAMES, PLANNING_COLUMNS, TraceMeta, TraceRecord
from llmreplay.trace_io import iter_trace_batches, trace_files

BATCH_ROWS = 4096  # a batch of a content trace is a few MB while it is read
COLUMNS = PLANNING_COLUMNS  # arrival_time kept as int64 microseconds
MESSAGE_COUNT = "message_count"  # derived: messages in the row's shape (llmreplay.count_units reads it)


@dataclass(frozen=True, slots=True)
class TraceRows:
    """The planning columns of every trace row, sorted by arrival (stable: ties keep file order)."""

    table: pa.Table  # COLUMNS, arrival_time as int64 microseconds
    row: np.ndarray  # position of each row in the trace's file order, for stream_records
    has_content: np.ndarray  # bool: recorded content, no prompt synthesis needed
    meta: TraceMeta
    files: tuple[Path, ...]

    def __len__(self) -> int:
        return self.table.num_rows

    def records(self, indices) -> list[dict]:
        """The rows at `indices` as dicts (TraceRecord's names but `arrival_time`)."""
        return self.table.take(pa.array(indices, pa.int64())).to_pylist()


def read_trace_rows(path: str | os.PathLike) -> TraceRows:
    """Validate the whole trace (streamed) and keep the planning columns of every row (~150 bytes)."""
    files = tuple(trace_files(path))
    meta, batches = iter_trace_batches(path, BATCH_ROWS)
    tables, content = [], []
    all_content = True
    for batch in batches:
        flags = _has_content(batch)
        all_content = all_content and flags is not None
        content.append(
            np.zeros(batch.num_rows, bool) if flags is None else flags.to_numpy(zero_copy_only=False)
        )
        table = pa.Table.from_batches([batch]).select(COLUMNS)
        table = table.append_column(MESSAGE_COUNT, pc.list_value_length(batch.column("messages")))
        tables.append(table.set_column(1, "arrival_time", pc.cast(table.column(1), pa.int64())))
    table = pa.concat_tables(tables) if tables else _empty_table()  # chunked: combining would copy it
    has_content = np.concatenate(content) if content else np.zeros(0, bool)
    row = np.arange(table.num_rows, dtype=np.int64)
    if len(files) > 1:
        order = pc.sort_indices(table, sort_keys=[("arrival_time", "ascending")])  # stable
        table, row, has_content = table.take(order), row[order.to_numpy()], has_content[order.to_numpy()]
    return TraceRows(table, row, has_content, meta.replace(content=all_content), files)


def _empty_table() -> pa.Table:
    schema = trace_schema(False)
    fields = [schema.field(name) for name in COLUMNS]
    fields[1] = pa.field("arrival_time", pa.int64())
    return pa.schema([*fields, pa.field(MESSAGE_COUNT, pa.int32())]).empty_table()


def _has_content(batch: pa.RecordBatch) -> pa.Array | None:
    if not all(name in batch.schema.names for name in CONTENT_COLUMN_NAMES):
        return None
    return pc.or_(pc.is_valid(batch.column("content_messages")), pc.is_valid(batch.column("content_prompt")))


def stream_records(path: str | os.PathLike, wanted: Sequence[int]) -> Iterator[tuple[int, TraceRecord]]:
    """(row, record) for each row position in `wanted` (sorted, no repeats), reading the trace in
    batches and converting only the rows asked for; stops after the last one."""
    if len(wanted) == 0:
        return
    _, batches = iter_trace_batches(path, BATCH_ROWS)
    at, base = 0, 0
    for batch in batches:
        end = base + batch.num_rows
        stop = at
        while stop < len(wanted) and wanted[stop] < end:
            stop += 1
        if stop > at:
            local = pa.array([int(wanted[i]) - base for i in range(at, stop)], pa.int64())
            for offset, row in enumerate(batch.take(local).to_pylist()):
                yield int(wanted[at + offset]), TraceRecord.from_row(row)
            at = stop
            if at == len(wanted):
                return
        base = end
