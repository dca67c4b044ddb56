"""The raw journal, written by the proxy process: finished captures as frames, in segment files.

It is the recorder's source of truth: a capture is in the OS within ~50 ms of its flow's end and on
disk within a flush interval, before any parsing. The converter process tails the segments,
turns them into rows and deletes each closed segment once those rows are safe elsewhere.
Nothing here parses, tokenizes or imports pyarrow: this runs inside the proxy.
"""

from __future__ import annotations

import logging
import os
import queue
import re
import threading
import time
from pathlib import Path

from recorder.capture import Capture
from recorder.frames import RUN_END, SEGMENT_END, encode_capture, encode_marker, encode_watermark

log = logging.getLogger("llmreplay.recorder")

# One write() per batch: waking per request would cost a thread switch and a GIL hand-off each time.
BATCH_WAIT_S = 0.05
# Short segments keep the journal small: each is deleted once the converter has spooled its rows.
SEGMENT_S = 1.0
SEGMENT_BYTES = 64 * 1024 * 1024
_STOP = object()
_NAME = re.compile(r"raw-(?P<token>[0-9a-f]+)-(?P<number>\d{6})\.frames")


def segment_path(spool_dir: Path, run_token: str, number: int) -> Path:
    return spool_dir / f"raw-{run_token}-{number:06d}.frames"


def journal_segments(spool_dir: Path) -> list[tuple[str, int, Path]]:
    """(run token, number, path) of every journal segment, oldest first within each run."""
    found = []
    for path in spool_dir.glob("raw-*.frames"):
        match = _NAME.fullmatch(path.name)
        if match:
            found.append((match["token"], int(match["number"]), path))
    return sorted(found)


class Journal:
    """Appends frames from a thread. `submit` and `tick` are the only calls made from the event loop."""

    def __init__(self, spool_dir: Path, run_token: str, flush_interval_s: float):
        self.spool_dir = spool_dir
        self.run_token = run_token
        self.flush_interval_s = flush_interval_s
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="llmreplay-journal", daemon=True)
        self._fd: int | None = None
        self._number = 0
        self._segment_started = 0.0
        self._segment_bytes = 0
        self.captures_written = 0
        self.failure: BaseException | None = None

    # -- event-loop side -------------------------------------------------------------------
    def submit(self, cap: Capture) -> None:
        self._queue.put(cap)

    def tick(self, watermark_unix_ns: int) -> None:
        """Every request still live arrived at or after this instant (unix ns)."""
        self._queue.put(watermark_unix_ns)

    @property
    def backlog(self) -> int:
        return self._queue.qsize()

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> None:
        self.spool_dir.mkdir(parents=True, exist_ok=True)
        self._open_next()
        self._thread.start()

    def close(self, timeout_s: float = 30.0) -> None:
        """Write what is queued, then the end-of-run marker, and sync (called after the last submit)."""
        if self._thread.is_alive():
            self._queue.put(_STOP)
            self._thread.join(timeout_s)

    # -- journal thread --------------------------------------------------------------------
    def _run(self) -> None:
        try:
            last_sync = time.monotonic()
            while True:
                items = self._drain()
                stop = self._write(items)
                now = time.monotonic()
                if stop:
                    self._append(encode_marker(RUN_END))
                    os.fsync(self._fd)
                    os.close(self._fd)
                    return
                if now - last_sync >= self.flush_interval_s:
                    os.fsync(self._fd)
                    last_sync = now
                if self._segment_bytes and (
                    now - self._segment_started >= SEGMENT_S or self._segment_bytes >= SEGMENT_BYTES
                ):
                    self._rotate()
        except BaseException as exc:  # noqa: BLE001 - reported to the addon, which stops the proxy
            self.failure = exc
            log.critical("recorder journal failed: %s: %s", type(exc).__name__, exc, exc_info=True)

    def _drain(self) -> list:
        time.sleep(BATCH_WAIT_S)
        try:
            items = [self._queue.get(timeout=self.flush_interval_s)]
        except queue.Empty:
            return []
        while len(items) < 4096:
            try:
                items.append(self._queue.get_nowait())
            except queue.Empty:
                break
        return items

    def _write(self, items: list) -> bool:
        frames, stop = [], False
        for item in items:
            if item is _STOP:
                stop = True
            elif isinstance(item, int):
                frames.append(encode_watermark(item))
            else:
                frames.append(encode_capture(item))
                self.captures_written += 1
        if frames:
            self._append(b"".join(frames))
        return stop

    def _append(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view) :]
        self._segment_bytes += len(data)

    def _open_next(self) -> None:
        self._number += 1
        path = segment_path(self.spool_dir, self.run_token, self._number)
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o600)
        self._segment_started = time.monotonic()
        self._segment_bytes = 0

    def _rotate(self) -> None:
        """The next segment exists before the old one says it ended, so a reader never waits on a gap."""
        old = self._fd
        self._open_next()
        view = encode_marker(SEGMENT_END)
        os.write(old, view)
        os.fsync(old)
        os.close(old)
