"""Rows -> spool -> sorted, rotated Parquet files, inside the converter process; and row-spool recovery.

Rows finish in completion order but a trace file must be sorted by arrival, so rows wait in a
heap until the proxy's watermark (the oldest live request's arrival) has passed them.
"""

from __future__ import annotations

import heapq
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import orjson
import pyarrow as pa

from llmreplay.trace_arrow import trace_schema
from llmreplay.trace_format import TraceMeta
from llmreplay.trace_io import TraceWriter
from llmreplay.trace_values import UnwritableRow, bounded_row
from recorder.spool import SPOOL_DIR, SpoolSegment, leftover_segments, read_segment

log = logging.getLogger("llmreplay.recorder")

ROW_GROUP_ROWS = 10_000
Reject = Callable[[dict, str], None]  # (row, reason): keep a row that cannot be written, elsewhere


@dataclass(frozen=True, slots=True)
class WriterSettings:
    out_dir: Path
    meta: TraceMeta
    flush_interval_s: float
    rotate_s: float | None
    rotate_bytes: int | None
    file_token: str  # "<run token>-<converter pid>": unique per converter, starts with the run token


class RowFiler:
    """Owns the row spool and the Parquet files; driven by one loop, no thread of its own."""

    def __init__(self, settings: WriterSettings):
        self.settings = settings
        self.spool_dir = settings.out_dir / SPOOL_DIR
        self.spool_dir.mkdir(parents=True, exist_ok=True)
        self._heap: list[tuple[int, int, dict]] = []
        self._late: list[dict] = []
        self._seq = 0
        self._watermark_us = 0
        self._emitted_high_us = -1
        self._segment: _Segment | None = None
        self._number = 0
        self.rows_spooled = 0
        self.rows_in_files = 0
        self.files_written = 0
        self.reject: Reject = _raise  # the converter sets its dead-letter box here

    def add(self, rows: list[dict]) -> None:
        """Spool the rows (the OS has them on return) and hold them until the watermark passes."""
        if not rows:
            return
        spool = self._open_segment().spool
        try:
            spool.append(rows)
        except (TypeError, orjson.JSONEncodeError):  # nothing was written: find the row that cannot be
            rows = [row for row in rows if self._spooled_alone(spool, row)]
        self.rows_spooled += len(rows)
        for row in rows:
            self._hold(row)

    def _spooled_alone(self, spool: SpoolSegment, row: dict) -> bool:
        try:
            spool.append([row])
            return True
        except (TypeError, orjson.JSONEncodeError) as exc:
            self.reject(row, f"row not serializable: {exc}")
            return False

    def watermark(self, watermark_unix_ns: int) -> None:
        """Every request still live in the proxy arrived at or after this instant."""
        self._watermark_us = max(self._watermark_us, watermark_unix_ns // 1000)

    def sync(self) -> None:
        if self._segment:
            self._segment.spool.sync()

    def file_ready(self) -> None:
        """Write the rows the watermark has passed; rotate the file when it is due."""
        self._emit_ready()
        if self._segment and self._segment.due(self.settings):
            self._rotate()

    def finish(self) -> None:
        """Clean stop: every held row into the current file, which is then renamed into place."""
        self._watermark_us = 1 << 62
        self._emit_ready()
        if self._segment:
            self._segment.finish(self._late)
            self.files_written += 1
            self._segment = None

    def _hold(self, row: dict) -> None:
        arrival = row["arrival_time"]
        if arrival < self._emitted_high_us:
            self._late.append(row)  # outlived the reorder window: kept in its own sorted file
        else:
            self._seq += 1
            heapq.heappush(self._heap, (arrival, self._seq, row))

    def _emit_ready(self) -> None:
        ready = []
        while self._heap and self._heap[0][0] < self._watermark_us:
            arrival, _, row = heapq.heappop(self._heap)
            ready.append(row)
            self._emitted_high_us = arrival
        if ready:
            self._open_segment().add(ready)
            self.rows_in_files += len(ready)

    def _open_segment(self) -> _Segment:
        if self._segment is None:
            self._number += 1
            self._segment = _Segment.create(self.settings, self.spool_dir, self._number, self.reject)
        return self._segment

    def _rotate(self) -> None:
        """Carry held rows into the next segment's spool first, so a crash here loses nothing."""
        old = self._segment
        self._segment = None
        if self._heap:
            self._open_segment().spool.append(row for _, _, row in sorted(self._heap, key=lambda e: e[:2]))
        old.finish(self._late)
        self._late = []
        self.files_written += 1


class _Segment:
    """One Parquet file in the making and the spool segment that guards its rows."""

    def __init__(self, name: str, settings: WriterSettings, spool: SpoolSegment, reject: Reject):
        self.name = name
        self.reject = reject
        self.settings = settings
        self.spool = spool
        self.started = time.monotonic()
        self.path = settings.out_dir / f"{name}.parquet"
        self._writer: TraceWriter | None = None
        self._pending: list[dict] = []
        self._written_rows = 0

    @classmethod
    def create(cls, settings: WriterSettings, spool_dir: Path, number: int, reject: Reject) -> _Segment:
        name = f"trace-{_stamp()}-{settings.file_token}-{number:05d}"
        _write_private(spool_dir / f"{name}.meta.json", settings.meta.to_json())
        return cls(name, settings, SpoolSegment(spool_dir / f"{name}.jsonl"), reject)

    def add(self, rows: list[dict]) -> None:
        self._pending.extend(rows)
        if len(self._pending) >= ROW_GROUP_ROWS:
            self._write_pending()

    def due(self, settings: WriterSettings) -> bool:
        if settings.rotate_s is not None and time.monotonic() - self.started >= settings.rotate_s:
            return self._written_rows + len(self._pending) > 0
        if settings.rotate_bytes is not None and self._writer is not None:
            size = os.path.getsize(self._writer._tmp)
            estimate = size + len(self._pending) * size / max(1, self._written_rows)
            return estimate >= settings.rotate_bytes
        return False

    def _write_pending(self) -> None:
        if not self._pending:
            return
        if self._writer is None:
            self._writer = TraceWriter(
                self.path, self.settings.meta, row_group_size=ROW_GROUP_ROWS
            ).__enter__()
        self._writer.write_table(rows_table(self._pending, self.settings.meta, self.reject))
        self._written_rows += len(self._pending)
        self._pending = []

    def finish(self, late: list[dict]) -> None:
        """Late rows first, then the main file's rename, then the spool goes: the recovery order relies on it."""
        if late:
            write_rows(self.settings.out_dir / f"{self.name}-late.parquet", late, self.settings.meta, self.reject)
        self._write_pending()
        if self._writer is not None:
            self._writer.__exit__(None, None, None)
        self.spool.close_and_delete()
        (self.spool.path.with_suffix(".meta.json")).unlink(missing_ok=True)


def _write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)


def _stamp() -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())


def run_token_of(file_name: str) -> str:
    """Trace and spool files are named `trace-<stamp>-<run token>-...`."""
    parts = file_name.split("-")
    return parts[2] if len(parts) > 3 else ""


def _raise(row: dict, reason: str) -> None:
    raise ValueError(f"request {row.get('request_id')}: {reason}")


def rows_table(rows: list[dict], meta: TraceMeta, reject: Reject = _raise) -> pa.Table:
    """The rows as a trace table; a row Arrow refuses (the row check should make that impossible) is
    handed to `reject` and left out, so it cannot take the rows of its batch with it."""
    schema = trace_schema(meta.content)
    try:
        return pa.Table.from_pylist(rows, schema=schema)
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        kept = []
        for row in rows:
            try:
                pa.Table.from_pylist([row], schema=schema)
                kept.append(row)
            except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
                reject(row, f"not convertible to the trace schema: {exc}")
        return pa.Table.from_pylist(kept, schema=schema)


def _checked(row: dict, reject: Reject) -> bool:
    try:
        bounded_row(row)
        return True
    except UnwritableRow as exc:
        reject(row, str(exc))
        return False


def write_rows(path: Path, rows: list[dict], meta: TraceMeta, reject: Reject = _raise) -> None:
    """A whole sorted trace file from row dicts, atomically."""
    rows = sorted(rows, key=lambda row: row["arrival_time"])
    with TraceWriter(path, meta) as writer:
        writer.write_table(rows_table(rows, meta, reject))


def recover_spool(out_dir: Path, meta: TraceMeta, reject: Reject = _raise) -> int:
    """Turn row-spool segments left by a dead converter into Parquet files; returns the rows recovered.

    A row may sit in two segments (rotation carries held rows forward) and in a finished file (the
    crash came between a file's rename and its spool's removal): each row is written once, by id.
    """
    spool_dir = out_dir / SPOOL_DIR
    for stale in out_dir.glob(".trace-*.parquet.tmp-*"):
        stale.unlink(missing_ok=True)
    loaded = [(segment, read_segment(segment)) for segment in leftover_segments(spool_dir)]
    wanted = {row.get("request_id") for _, rows in loaded for row in rows}
    filed = filed_ids(out_dir, {run_token_of(s.name) for s, _ in loaded}, wanted)
    recovered = 0
    for segment, rows in loaded:
        name = segment.name.removesuffix(".jsonl")
        meta_path = spool_dir / f"{name}.meta.json"
        segment_meta = TraceMeta.from_json(meta_path.read_bytes()) if meta_path.exists() else meta
        # spools of older versions may hold rows no reader takes (the poison of issue #12): check again
        fresh = {row.get("request_id"): row for row in rows if row.get("request_id") not in filed}
        fresh = {rid: row for rid, row in fresh.items() if _checked(row, reject)}
        if fresh:
            write_rows(out_dir / f"{name}-recovered.parquet", list(fresh.values()), segment_meta, reject)
            filed.update(fresh)
            recovered += len(fresh)
        segment.unlink()
        meta_path.unlink(missing_ok=True)
    return recovered


def filed_ids(out_dir: Path, run_tokens: set[str], wanted: set) -> set:
    """Which of `wanted` request ids are already in a finished trace file of those runs."""
    found: set = set()
    if not wanted:
        return found
    import pyarrow.parquet as pq

    for path in out_dir.glob("trace-*.parquet"):
        if run_token_of(path.name) in run_tokens:
            ids = pq.read_table(path, columns=["request_id"]).column("request_id").to_pylist()
            found.update(wanted.intersection(ids))
    return found
