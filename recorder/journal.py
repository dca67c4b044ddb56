"""The raw journal, the recorder's source of truth: a finished capture is one frame appended with one
write() on the event loop before the client has its response's end, so a killed proxy loses nothing
that completed (docs/design/recorder-journal.md). Nothing here parses, tokenizes or imports pyarrow."""

from __future__ import annotations

import errno
import logging
import os
import re
import threading
import time
from collections import deque
from pathlib import Path

from recorder.capture import Capture
from recorder.dead_letter import DeadLetterSize
from recorder.frames import (
    RUN_END,
    SEGMENT_END,
    encode_amend,
    encode_capture,
    encode_marker,
    encode_watermark,
)

log = logging.getLogger("llmreplay.recorder")

# Short segments keep the journal small: each is deleted once the converter has spooled its rows.
SEGMENT_S = 1.0
SEGMENT_BYTES = 64 * 1024 * 1024
RETRY_S = 1.0  # after a failed write (a full disk), captures are dropped and counted until this passed
_NAME = re.compile(r"raw-(?P<token>[0-9a-f]+)-(?P<number>\d{6})\.frames")


def segment_path(spool_dir: Path, run_token: str, number: int) -> Path:
    return spool_dir / f"raw-{run_token}-{number:06d}.frames"


def segment_number(path: Path) -> int:
    match = _NAME.fullmatch(path.name)
    return int(match["number"]) if match else 0


def journal_segments(spool_dir: Path) -> list[tuple[str, int, Path]]:
    """(run token, number, path) of every journal segment, oldest first within each run."""
    found = []
    for path in spool_dir.glob("raw-*.frames"):
        match = _NAME.fullmatch(path.name)
        if match:
            found.append((match["token"], int(match["number"]), path))
    return sorted(found)


class Journal:
    """Appends frames on the event loop (`submit`, `tick`); a sync thread fsyncs and closes old segments.

    Never raises into the proxy: a write that fails (full disk, I/O error) or a journal over its
    disk budget drops the capture, counts it in `dropped` and says why in `impaired`.
    """

    def __init__(self, spool_dir: Path, run_token: str, flush_interval_s: float, limit_bytes: int):
        self.spool_dir = spool_dir
        self.run_token = run_token
        self.flush_interval_s = flush_interval_s
        self.limit_bytes = limit_bytes
        self._fd: int | None = None
        self._number = 0
        self._segment_started = 0.0
        self._segment_bytes = 0
        self._retry_at = 0.0
        self._segments: deque[list[int]] = deque()  # [number, bytes] of segments not yet deleted
        self._closing: deque[int] = deque()  # rotated fds the sync thread fsyncs and closes
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sync_loop, name="llmreplay-journal-sync", daemon=True)
        self.disk_bytes = 0  # journal bytes not yet converted plus dead letters, as of the last sync
        self._dead_letters = DeadLetterSize(spool_dir)
        self.captures_written = 0
        self.dropped = 0
        self.impaired: str | None = None  # why captures are being dropped now; None when all is well
        self.last_impairment: str | None = None

    # -- event-loop side -------------------------------------------------------------------
    def submit(self, cap: Capture) -> bool:
        """Append one finished capture; False when it was dropped (counted, never raised)."""
        if not self._writable():
            self.dropped += 1
            return False
        try:
            data = encode_capture(cap)
        except Exception as exc:  # noqa: BLE001 - an unencodable capture must not reach mitmproxy
            log.error("llmreplay recorder: capture %s not journaled: %s", cap.request_id, exc)
            self.dropped += 1
            return False
        if not self._append(data):
            self.dropped += 1
            return False
        self.captures_written += 1
        if self._segment_bytes >= SEGMENT_BYTES:
            self._rotate()
        return True

    def amend(self, cap: Capture) -> bool:
        """Settle a capture submitted while `pending` (its outcome after the hook); False when dropped."""
        if self._writable() and self._append(encode_amend(cap)):
            return True
        self.dropped += 1  # the converter files the pending capture as it was journaled
        return False

    def tick(self, watermark_unix_ns: int) -> None:
        """Every request still live arrived at or after this instant (unix ns); rotates when due."""
        if self._writable():
            self._append(encode_watermark(watermark_unix_ns))
        if self._fd is not None and self._segment_bytes and time.monotonic() - self._segment_started >= SEGMENT_S:
            self._rotate()

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> None:
        self.spool_dir.mkdir(parents=True, exist_ok=True)
        self._open_next()
        self._thread.start()

    def close(self) -> bool:
        """After the last submit: the end-of-run marker, synced. False when it could not be written."""
        self._stop.set()
        self._thread.join(30)
        ended = False
        if self._fd is not None:
            ended = self._append(encode_marker(RUN_END), force=True)
            try:
                os.fsync(self._fd)
            except OSError:
                ended = False
            os.close(self._fd)
            self._fd = None
        self._close_rotated()
        return ended

    # -- writing ---------------------------------------------------------------------------
    def _writable(self) -> bool:
        if self.impaired is None:
            return True
        if time.monotonic() < self._retry_at:
            return False
        if self.disk_bytes >= self.limit_bytes:
            self._retry_at = time.monotonic() + RETRY_S
            return False
        if self._fd is None and not self._open_next():
            return False
        self.impaired = None
        log.warning("llmreplay recorder: journal writable again; %d captures were dropped", self.dropped)
        return True

    def _append(self, data: bytes, force: bool = False) -> bool:
        """One write() of whole frames; a torn write is cut back, so the segment stays readable."""
        if self._fd is None:
            return False
        if not force and self.disk_bytes + self._segment_bytes + len(data) > self.limit_bytes:
            self._impair(
                f"journal and dead letters (.spool/rejected) over their disk budget ({self.limit_bytes} bytes,"
                " --spool-limit)"
            )
            return False
        written = 0
        try:
            while written < len(data):
                written += os.write(self._fd, data[written:] if written else data)
        except OSError as exc:
            self._cut_back(written)
            self._impair(f"journal write failed: {exc.strerror or exc}")
            return False
        self._segment_bytes += written
        self._segments[-1][1] = self._segment_bytes
        return True

    def _cut_back(self, written: int) -> None:
        if not written:
            return
        try:
            os.ftruncate(self._fd, self._segment_bytes)
        except OSError:
            # the torn frame stays (the converter stops reading this segment there); write no more to it
            self._closing.append(self._fd)
            self._fd = None

    def _impair(self, reason: str) -> None:
        if self.impaired is None:
            log.critical("llmreplay recorder: %s; forwarding goes on, captures are dropped and counted", reason)
        self.impaired = self.last_impairment = reason
        self._retry_at = time.monotonic() + RETRY_S

    def _open_next(self) -> bool:
        number = self._number + 1
        path = segment_path(self.spool_dir, self.run_token, number)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o600)
        except OSError as exc:
            self._impair(f"journal segment not created: {exc.strerror or exc}")
            return False
        self._number, self._fd = number, fd
        self._segments.append([number, 0])
        self._segment_started = time.monotonic()
        self._segment_bytes = 0
        return True

    def _rotate(self) -> None:
        """The next segment exists before the old one says it ended, so a reader never waits on a gap."""
        old = self._fd
        if not self._open_next():
            return  # keep appending to the old one
        try:
            os.write(old, encode_marker(SEGMENT_END))
        except OSError:
            pass  # the converter reads up to here; a dead run's reader takes the torn end as the end
        self._closing.append(old)

    # -- sync thread -----------------------------------------------------------------------
    def _sync_loop(self) -> None:
        while not self._stop.wait(self.flush_interval_s):
            try:
                self._sync_once()
            except Exception as exc:  # noqa: BLE001 - never let the sync thread die silently
                log.error("llmreplay recorder: journal sync failed: %s", exc)

    def _sync_once(self) -> None:
        fd = self._fd
        if fd is not None:
            try:
                os.fsync(fd)
            except OSError as exc:
                if exc.errno != errno.EBADF:  #: the loop closed it at stop, in between
                    log.error("llmreplay recorder: journal fsync failed: %s", exc.strerror)
        self._close_rotated()
        self.disk_bytes = self._bytes_on_disk()

    def _close_rotated(self) -> None:
        while self._closing:
            fd = self._closing.popleft()
            try:
                os.fsync(fd)
            except OSError:
                pass
            os.close(fd)

    def _bytes_on_disk(self) -> int:
        """Bytes of the closed segments the converter has not deleted yet (it deletes oldest first)."""
        segments = self._segments
        while len(segments) > 1 and not segment_path(self.spool_dir, self.run_token, segments[0][0]).exists():
            segments.popleft()
        return sum(size for _, size in list(segments)[:-1]) + self._dead_letters.poll()
