"""The writer thread: builds rows off the event loop, spools them, and writes sorted, rotated Parquet files.

Rows finish in completion order but a trace file must be sorted by arrival, so rows wait in a
heap until the event loop's watermark (the oldest live request's arrival) has passed them.
"""

from __future__ import annotations

import heapq
import logging
import os
import queue
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from llmreplay.trace_format import TraceMeta, trace_schema
from llmreplay.trace_io import TraceWriter
from recorder.capture import Capture
from recorder.record_builder import RecordBuilder
from recorder.spool import SPOOL_DIR, SpoolLock, SpoolSegment, leftover_segments, read_segment

log = logging.getLogger("llmreplay.recorder")

ROW_GROUP_ROWS = 10_000
# Pause between batches: waking once per request costs a thread switch and a GIL hand-off each
# time; rows still reach the spool well within the 1 s promise.
BATCH_WAIT_S = 0.05
_STOP = object()


@dataclass(frozen=True, slots=True)
class WriterSettings:
    out_dir: Path
    meta: TraceMeta
    flush_interval_s: float
    rotate_s: float | None
    rotate_bytes: int | None
    run_token: str


class RecordWriter:
    """Owns everything on disk. `submit` and `tick` are the only calls made from the event loop."""

    def __init__(self, settings: WriterSettings, builder: RecordBuilder):
        self.settings = settings
        self.builder = builder
        self.spool_dir = settings.out_dir / SPOOL_DIR
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="llmreplay-writer", daemon=True)
        self._lock: SpoolLock | None = None
        self._heap: list[tuple[int, int, dict]] = []
        self._late: list[dict] = []
        self._seq = 0
        self._watermark_us = 0
        self._emitted_high_us = -1
        self._segment: _Segment | None = None
        self.rows_spooled = 0
        self.rows_in_files = 0
        self.problems = 0
        self.files_written = 0
        self.failure: BaseException | None = None

    # -- event-loop side -------------------------------------------------------------------
    def submit(self, cap: Capture) -> None:
        self._queue.put(cap)

    def tick(self, watermark_unix_ns: int) -> None:
        """Every request still live arrived at or after this instant (unix ns)."""
        self._queue.put(("tick", watermark_unix_ns))

    @property
    def backlog(self) -> int:
        return self._queue.qsize()

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> None:
        self._lock = SpoolLock(self.spool_dir)
        recovered = recover_spool(self.settings.out_dir, self.settings.meta)
        if recovered:
            log.warning("recovered %d rows left in the spool by an earlier run", recovered)
        self._thread.start()

    def close(self, timeout_s: float = 60.0) -> None:
        """Flush every row into Parquet and stop (called after the last submit)."""
        if self._thread.is_alive():
            self._queue.put(_STOP)
            self._thread.join(timeout_s)
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    # -- writer thread ---------------------------------------------------------------------
    def _run(self) -> None:
        try:
            last_sync = time.monotonic()
            while True:
                items = self._drain()
                stop = self._absorb(items)
                now = time.monotonic()
                if self._segment and now - last_sync >= self.settings.flush_interval_s:
                    self._segment.spool.sync()
                    last_sync = now
                self._emit_ready()
                if self._segment and self._segment.due(self.settings):
                    self._rotate()
                if stop:
                    break
            self._watermark_us = 1 << 62
            self._emit_ready()
            if self._segment:
                self._segment.finish(self._late)
                self.files_written += 1
                self._segment = None
        except BaseException as exc:  # noqa: BLE001 - reported to the addon, which stops the proxy
            self.failure = exc
            log.critical("recorder writer failed: %s: %s", type(exc).__name__, exc, exc_info=True)

    def _drain(self) -> list:
        time.sleep(BATCH_WAIT_S)
        try:
            items = [self._queue.get(timeout=self.settings.flush_interval_s)]
        except queue.Empty:
            return []
        while len(items) < 4096:
            try:
                items.append(self._queue.get_nowait())
            except queue.Empty:
                break
        return items

    def _absorb(self, items: list) -> bool:
        rows, stop = [], False
        for item in items:
            if item is _STOP:
                stop = True
            elif isinstance(item, tuple):
                self._watermark_us = max(self._watermark_us, item[1] // 1000)
            else:
                rows.append(self._build_row(item))
        if rows:
            segment = self._open_segment()
            segment.spool.append(rows)
            self.rows_spooled += len(rows)
            for row in rows:
                self._hold(row)
        return stop

    def _build_row(self, cap: Capture) -> dict:
        record, problems = self.builder.build(cap)
        if problems:
            self.problems += 1
            log.info("request %s: recorded with problems: %s", cap.request_id, "; ".join(problems))
        row = record.to_row()
        if not self.settings.meta.content:
            row = {k: v for k, v in row.items() if not k.startswith("content_")}
        return row

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
            self._segment = _Segment.create(self.settings, self.spool_dir)
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

    def __init__(self, name: str, settings: WriterSettings, spool: SpoolSegment):
        self.name = name
        self.settings = settings
        self.spool = spool
        self.started = time.monotonic()
        self.path = settings.out_dir / f"{name}.parquet"
        self._writer: TraceWriter | None = None
        self._pending: list[dict] = []
        self._written_rows = 0

    @classmethod
    def create(cls, settings: WriterSettings, spool_dir: Path) -> _Segment:
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        name = f"trace-{stamp}-{settings.run_token}-{_next_number()}"
        (spool_dir / f"{name}.meta.json").write_bytes(settings.meta.to_json())
        return cls(name, settings, SpoolSegment(spool_dir / f"{name}.jsonl"))

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
        self._writer.write_table(
            pa.Table.from_pylist(self._pending, schema=trace_schema(self.settings.meta.content))
        )
        self._written_rows += len(self._pending)
        self._pending = []

    def finish(self, late: list[dict]) -> None:
        """Late rows first, then the main file's rename, then the spool goes: the recovery order relies on it."""
        if late:
            write_rows(self.settings.out_dir / f"{self.name}-late.parquet", late, self.settings.meta)
        self._write_pending()
        if self._writer is not None:
            self._writer.__exit__(None, None, None)
        self.spool.close_and_delete()
        (self.spool.path.with_suffix(".meta.json")).unlink(missing_ok=True)


_counter_lock = threading.Lock()
_counter = [0]


def _next_number() -> str:
    with _counter_lock:
        _counter[0] += 1
        return f"{_counter[0]:05d}"


def write_rows(path: Path, rows: list[dict], meta: TraceMeta) -> None:
    """A whole sorted trace file from row dicts, atomically."""
    rows = sorted(rows, key=lambda row: row["arrival_time"])
    with TraceWriter(path, meta) as writer:
        writer.write_table(pa.Table.from_pylist(rows, schema=trace_schema(meta.content)))


def recover_spool(out_dir: Path, meta: TraceMeta) -> int:
    """Turn spool segments left by a crash into Parquet files; returns the number of rows recovered.

    Segment N whose Parquet file exists was already written (its carried rows live in N+1);
    otherwise its rows are written now and excluded from N+1, where rotation may have copied them.
    """
    spool_dir = out_dir / SPOOL_DIR
    for stale in out_dir.glob(".trace-*.parquet.tmp-*"):
        stale.unlink(missing_ok=True)
    recovered, already_written = 0, set()
    for segment in leftover_segments(spool_dir):
        name = segment.name.removesuffix(".jsonl")
        meta_path = spool_dir / f"{name}.meta.json"
        segment_meta = TraceMeta.from_json(meta_path.read_bytes()) if meta_path.exists() else meta
        if (out_dir / f"{name}.parquet").exists():
            already_written = set()
        else:
            late = out_dir / f"{name}-late.parquet"
            skip = already_written | (_ids_in(late) if late.exists() else set())
            rows = [row for row in read_segment(segment) if row.get("request_id") not in skip]
            if rows:
                write_rows(out_dir / f"{name}.parquet", rows, segment_meta)
                recovered += len(rows)
            already_written = {row.get("request_id") for row in rows}
        segment.unlink()
        meta_path.unlink(missing_ok=True)
    return recovered


def _ids_in(path: Path) -> set[str]:
    import pyarrow.parquet as pq

    return set(pq.read_table(path, columns=["request_id"]).column("request_id").to_pylist())
