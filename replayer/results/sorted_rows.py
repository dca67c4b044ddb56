"""Result rows in completion order -> results.parquet sorted by (scheduled_offset_ns, request_id), never the
whole run in memory: rows spill to buckets of about BUCKET_ROWS planned offsets (Arrow IPC files beside the
run), each sorted alone and appended; equal offsets share a bucket, so the order is a global sort's.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

from llmreplay.output_paths import publish, temp_path

BUCKET_ROWS = 20_000  # ~2 KB a row with 150 chunk offsets: ~40 MB a bucket, twice while it is sorted
SORT_KEYS = [("scheduled_offset_ns", "ascending"), ("request_id", "ascending")]


def bucket_bounds(offsets: Iterable, rows_per_bucket: int = BUCKET_ROWS) -> np.ndarray:
    """Scheduled offsets that split the planned requests into buckets of about `rows_per_bucket`.

    `offsets`: each worker's planned offsets (any int64 buffer, e.g. array("q"))."""
    parts = [np.frombuffer(o, dtype=np.int64) for o in offsets if len(o)]
    if not parts:
        return np.empty(0, np.int64)
    every = np.sort(np.concatenate(parts))
    return np.unique(every[rows_per_bucket::rows_per_bucket])


class SortedResultsWriter:
    """`write` tables of result rows in any order; `close` writes `path` sorted, atomically."""

    def __init__(self, path: Path, schema: pa.Schema, bounds: np.ndarray, spill_dir: Path):
        self.path = path
        self.schema = schema
        self.rows = 0
        self._bounds = bounds
        self._spill_dir = spill_dir
        self._buckets: dict[int, ipc.RecordBatchFileWriter] = {}

    def _bucket_path(self, bucket: int) -> Path:
        return self._spill_dir / f"results-bucket-{bucket}.arrow"

    def write(self, table: pa.Table) -> None:
        if table.num_rows == 0:
            return
        self.rows += table.num_rows
        offsets = table.column("scheduled_offset_ns").to_numpy()
        buckets = np.searchsorted(self._bounds, offsets, side="right")
        order = np.argsort(buckets, kind="stable")
        grouped = table.take(pa.array(order))
        ids, starts = np.unique(buckets[order], return_index=True)
        ends = [*starts[1:], table.num_rows]
        for bucket, start, end in zip(ids.tolist(), starts.tolist(), ends, strict=True):
            writer = self._buckets.get(bucket)
            if writer is None:
                writer = self._buckets[bucket] = ipc.new_file(self._bucket_path(bucket), self.schema)
            writer.write_table(grouped.slice(start, end - start))

    def close(self) -> None:
        """Sort bucket by bucket into a temporary file, fsync, rename: complete or absent."""
        tmp = temp_path(self.path)
        try:
            with pq.ParquetWriter(tmp, self.schema, compression="zstd") as out:
                for bucket in sorted(self._buckets):
                    self._buckets.pop(bucket).close()
                    spilled = self._bucket_path(bucket)
                    with pa.memory_map(str(spilled)) as source:
                        table = ipc.open_file(source).read_all()
                    out.write_table(table.take(pc.sort_indices(table, sort_keys=SORT_KEYS)))
                    del table
                    spilled.unlink()
            publish(tmp, self.path)
        finally:
            tmp.unlink(missing_ok=True)
            self.abort()

    def abort(self) -> None:
        """Remove whatever was spilled (after a failure; close does it on success)."""
        for bucket, writer in list(self._buckets.items()):
            writer.close()
            self._bucket_path(bucket).unlink(missing_ok=True)
        self._buckets.clear()
