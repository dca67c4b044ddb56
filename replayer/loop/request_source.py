"""Encoded requests by plan index, read a window ahead from the worker's request file while the run
goes on: memory is bounded by the window plus the sessions in progress, not the shard.
How the reader thread keeps the window and what it costs: docs/design/replay-memory.md."""

from __future__ import annotations

import bisect
import os
import threading
from array import array
from collections.abc import Sequence
from pathlib import Path

from replayer.loop.helper_threads import yield_to_loop
from replayer.loop.request_file import RequestFields, tail_start

CHUNK_BYTES = 1 << 20
AHEAD_BYTES = 4 << 20  # at 50 req/s of 4 KB bodies, 20 s of requests; at 10,000 req/s, 100 ms


class RequestSource:
    """`source[i]` is request i's bytes (head + tail); a Sequence for the runner."""

    def __init__(
        self,
        tails_path: str | Path,
        fields: RequestFields,
        heads: Sequence[bytes],
        follow_ups: Sequence[int],
        chunk_bytes: int = CHUNK_BYTES,
        ahead_bytes: int = AHEAD_BYTES,
    ):
        self._fd = os.open(tails_path, os.O_RDONLY)
        self._ends = fields.ends
        self._path_codes = fields.path_codes
        self._heads = tuple(heads)  # by path code
        self._follow_ups = array("q", sorted(follow_ups))  # plan indices sent after a previous turn
        self._chunk_bytes = max(1, chunk_bytes)
        self._ahead_bytes = ahead_bytes
        self._taken = bytearray(len(fields))
        self._chunks: tuple[tuple[int, int, int, memoryview], ...] = ()  # (first, end, offset, data)
        self._kept: dict[int, bytes] = {}  # follow-ups copied out of dropped chunks
        self._next = 0  # first request index not read yet
        self.high = -1  # highest index the loop asked for
        self.loop_reads = 0
        self.advances = 0  # times the window was moved (start, then each wake-up)
        self._refill_at = 0  # the loop wakes the reader when it asks for this index or a later one
        self._wake = threading.Event()
        self._closed = False
        self._thread: threading.Thread | None = None

    def __len__(self) -> int:
        return len(self._ends)

    def __getitem__(self, index: int) -> bytes:
        tail = self._kept.pop(index, None)
        if tail is None:
            for first, end, offset, data in self._chunks:
                if first <= index < end:
                    start = tail_start(self._ends, index)
                    tail = data[start - offset : self._ends[index] - offset]
                    break
            else:
                tail = self._pread(index)
                self.loop_reads += 1
        self._taken[index] = 1
        if index > self.high:
            self.high = index
            if index >= self._refill_at:
                self._refill_at = len(self._ends)
                self._wake.set()
        return self._heads[self._path_codes[index]] + tail

    def start(self) -> None:
        """Load the first window now (before the clock starts), then keep it filled from a thread."""
        self._advance()
        self._thread = threading.Thread(target=self._run, name="llmreplay-request-reader", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._closed = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
        self._chunks, self._kept = (), {}
        os.close(self._fd)

    def _run(self) -> None:
        yield_to_loop()
        while True:
            self._wake.wait()
            if self._closed:
                return
            self._wake.clear()
            self._advance()

    def _advance(self) -> None:
        """Drop chunks a chunk behind the loop (keeping their unsent follow-ups), read ahead."""
        ends = self._ends
        high = max(self.high, 0)
        at = tail_start(ends, high)  # where the loop is in the file
        chunks = self._chunks
        while chunks and chunks[0][1] <= high and ends[chunks[0][1] - 1] + self._chunk_bytes <= at:
            self._keep_follow_ups(chunks[0])
            chunks = chunks[1:]
        while self._next < len(ends):
            if tail_start(ends, self._next) - at >= self._ahead_bytes:
                break
            chunks = (*chunks, self._read_chunk())
        self._chunks = chunks
        refill_at = bisect.bisect_left(ends, tail_start(ends, self._next) - self._ahead_bytes // 2)
        if self._next == len(ends):  # all read: wake only to drop what falls behind, once a chunk
            refill_at = bisect.bisect_left(ends, at + self._chunk_bytes * 2)
        self._refill_at = max(refill_at, high + 1)
        self.advances += 1

    def _read_chunk(self) -> tuple[int, int, int, memoryview]:
        ends, first = self._ends, self._next
        offset = tail_start(ends, first)
        end = max(first + 1, bisect.bisect_right(ends, offset + self._chunk_bytes, first))
        data = os.pread(self._fd, ends[end - 1] - offset, offset)
        self._next = end
        return first, end, offset, memoryview(data)

    def _keep_follow_ups(self, chunk: tuple[int, int, int, memoryview]) -> None:
        first, end, offset, data = chunk
        follow_ups, ends, taken = self._follow_ups, self._ends, self._taken
        lo = bisect.bisect_left(follow_ups, first)
        hi = bisect.bisect_left(follow_ups, end, lo)
        for index in follow_ups[lo:hi]:
            if not taken[index]:
                start = tail_start(ends, index)
                self._kept[index] = bytes(data[start - offset : ends[index] - offset])

    def _pread(self, index: int) -> bytes:
        start = tail_start(self._ends, index)
        return os.pread(self._fd, self._ends[index] - start, start)
