"""Reading the raw journal in the converter process: tail the live run's segments, or read a dead run's.

A live segment ends with a SEGMENT_END frame (the next one already exists) or, at a clean stop,
RUN_END. A dead run's last segment simply stops, perhaps mid-frame: that torn frame is dropped.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from recorder.frames import RUN_END, SEGMENT_END, FrameBuffer
from recorder.journal import journal_segments, segment_path

log = logging.getLogger("llmreplay.recorder")

READ_BYTES = 4 * 1024 * 1024


class JournalTail:
    """Follows one run's segments in order, across rotations, from the oldest one still present."""

    def __init__(self, spool_dir: Path, run_token: str):
        self.spool_dir = spool_dir
        self.run_token = run_token
        numbers = [n for token, n, _ in journal_segments(spool_dir) if token == run_token]
        self.number = min(numbers, default=1)
        self.finished: list[Path] = []  # segments read to their end marker, not yet deleted
        self.run_ended = False
        self._fd: int | None = None
        self._buffer = FrameBuffer()

    def read(self) -> list[tuple[bytes, bytes, bytes]]:
        """The frames appended since the last call (markers consumed here), at most ~READ_BYTES of them."""
        out: list[tuple[bytes, bytes, bytes]] = []
        while not self.run_ended and self._open():
            data = os.read(self._fd, READ_BYTES)
            if not data:
                break
            self._buffer.feed(data)
            frames = self._buffer.frames()
            if self._buffer.damage:
                raise ValueError(f"journal segment {self.number}: {self._buffer.damage}")
            for frame in frames:
                kind = frame[0]
                if kind == SEGMENT_END:
                    self._next_segment()
                elif kind == RUN_END:
                    self.run_ended = True
                    self.finished.append(segment_path(self.spool_dir, self.run_token, self.number))
                else:
                    out.append(frame)
            if len(data) >= READ_BYTES or out:
                break
        return out

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _open(self) -> bool:
        if self._fd is None:
            path = segment_path(self.spool_dir, self.run_token, self.number)
            try:
                self._fd = os.open(path, os.O_RDONLY)
            except FileNotFoundError:
                return False  # the proxy has not created it yet
        return True

    def _next_segment(self) -> None:
        if self._buffer.pending_bytes:
            log.error(
                "journal segment %d: %d bytes after its end marker ignored",
                self.number,
                self._buffer.pending_bytes,
            )
            self._buffer = FrameBuffer()
        self.close()
        self.finished.append(segment_path(self.spool_dir, self.run_token, self.number))
        self.number += 1


def read_dead_segment(path: Path, still_written: bool = False) -> list[tuple[bytes, bytes, bytes]]:
    """Every whole frame of a segment nobody writes any more; a torn or damaged tail is dropped.

    `still_written`: the live run's segment, read once at a converter restart; a partial last frame
    is then just the proxy writing, not damage.
    """
    buffer = FrameBuffer()
    buffer.feed(path.read_bytes())
    frames = buffer.frames()
    if buffer.damage:
        log.error("journal %s: %s; the frames after it are lost", path.name, buffer.damage)
    elif buffer.pending_bytes and not still_written:
        log.warning("journal %s: torn last frame (%d bytes) dropped", path.name, buffer.pending_bytes)
    return [frame for frame in frames if frame[0] not in (SEGMENT_END, RUN_END)]
