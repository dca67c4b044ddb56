"""The sim's ground-truth logs: one Parquet row per request, and one per engine step.

Rows collect on the event loop as tuples; a single writer thread converts and writes them in
batches. The file appears under its final name only when closed (temp name, then rename).
"""

from __future__ import annotations

import os
from concurrent.futures import Executor
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from llmreplay.output_paths import publish, temp_path

# (name, type, nullable); monotonic times come from time.perf_counter_ns(), the clock the
# replayer uses on the same machine, so offsets compare directly.
REQUEST_COLUMNS: tuple[tuple[str, pa.DataType, bool], ...] = (
    ("request_id", pa.string(), False),  # X-Request-Id when present, else generated
    ("arrival_unix_ns", pa.int64(), False),  # wall clock, only to align with other systems
    ("arrival_mono_ns", pa.int64(), False),
    ("admitted_mono_ns", pa.int64(), True),  # entered the running batch
    ("first_token_mono_ns", pa.int64(), True),  # first token written, on any channel (reasoning included)
    ("last_token_mono_ns", pa.int64(), True),
    ("queue_ns", pa.int64(), True),  # admitted - arrival (includes tokenization, injected delay)
    ("prompt_tokens", pa.int32(), True),
    ("cached_tokens", pa.int32(), True),
    ("completion_tokens", pa.int32(), True),  # tokens actually delivered
    ("stream", pa.bool_(), True),
    ("status", pa.int16(), False),  # HTTP status sent (0: none, the request hung)
    ("outcome", pa.string(), False),  # ok, cancelled_by_client, cut, truncated, stream_error, invalid, ...
    ("finish_reason", pa.string(), True),
    ("fault", pa.string(), True),  # injected fault, if any
    ("model", pa.string(), True),
    ("endpoint", pa.string(), False),  # chat_completions | completions | responses | messages
    ("first_answer_mono_ns", pa.int64(), True),  # first token after the reasoning (= first token without)
    ("reasoning_tokens", pa.int32(), True),  # of completion_tokens, streamed before the answer
)

STEP_COLUMNS: tuple[tuple[str, pa.DataType, bool], ...] = (
    ("start_mono_ns", pa.int64(), False),
    ("deadline_mono_ns", pa.int64(), False),
    ("end_mono_ns", pa.int64(), False),  # when the step's tokens began to be written
    ("lateness_ns", pa.int64(), False),  # end - deadline: the sim's own event-loop lag
    ("emit_ns", pa.int64(), False),  # time spent writing the step's tokens
    ("batch_size", pa.int32(), False),
    ("admitted", pa.int32(), False),
    ("prefill_tokens", pa.int32(), False),
    ("spiked", pa.bool_(), False),
)

# Converting rows to Arrow holds the GIL (~1 ms per 1000 rows measured), which delays the event
# loop; small, frequent conversions keep each pause short. Row groups are written much bigger.
FLUSH_ROWS = 1024
ROW_GROUP_ROWS = 65_536


def steps_log_path(log_path: str | os.PathLike) -> Path:
    """Where the step log goes: `<stem>.steps.parquet` next to the request log."""
    path = Path(log_path)
    return path.with_name(f"{path.stem}.steps.parquet")


def schema_of(columns) -> pa.Schema:
    return pa.schema([pa.field(name, dtype, nullable=nullable) for name, dtype, nullable in columns])


class ParquetSpool:
    """Append tuples on the loop; `flush` hands them to the writer thread; `close` publishes the file."""

    def __init__(self, path: str | os.PathLike, columns, executor: Executor):
        self.path = Path(path)
        self._schema = schema_of(columns)
        self._executor = executor
        self._rows: list[tuple] = []
        self._temp = temp_path(self.path)
        self._writer: pq.ParquetWriter | None = None
        self._batches: list[pa.RecordBatch] = []  # converted, not yet written (writer thread only)
        self._batched_rows = 0
        self.rows_written = 0

    def append(self, row: tuple) -> None:
        self._rows.append(row)
        if len(self._rows) >= FLUSH_ROWS:
            self.flush()

    def flush(self):
        """Hand the pending rows to the writer thread; returns its future (None when nothing pending)."""
        if not self._rows:
            return None
        rows, self._rows = self._rows, []
        return self._executor.submit(self._write, rows)

    def close(self):
        """Flush and publish under the final name (runs in the writer thread, after earlier batches)."""
        self.flush()
        return self._executor.submit(self._publish)

    def _write(self, rows: list[tuple]) -> None:
        columns = zip(*rows, strict=True)
        arrays = [
            pa.array(values, type=field.type) for values, field in zip(columns, self._schema, strict=True)
        ]
        self._batches.append(pa.RecordBatch.from_arrays(arrays, schema=self._schema))
        self._batched_rows += len(rows)
        if self._batched_rows >= ROW_GROUP_ROWS:
            self._write_row_group()

    def _write_row_group(self) -> None:
        if self._writer is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._writer = pq.ParquetWriter(self._temp, self._schema, compression="zstd")
        if self._batches:
            self._writer.write_table(pa.Table.from_batches(self._batches, schema=self._schema))
        self.rows_written += self._batched_rows
        self._batches, self._batched_rows = [], 0

    def _publish(self) -> None:
        self._write_row_group()
        self._writer.close()
        publish(self._temp, self.path)
