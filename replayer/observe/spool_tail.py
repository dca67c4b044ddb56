"""Live latencies and error kinds read from the workers' result spools as they grow: the workers do no
work for it (they spool anyway), and the figures are the very values results.parquet will hold."""

from __future__ import annotations

import marshal
import time
from collections import Counter, deque
from pathlib import Path

from replayer.loop.result_spool import _FRAME, outcome_of, partial_path

SHED = "shed_by_client"
WINDOW_NS = 60 * 1_000_000_000  # the rolling quantiles cover requests finished in the last minute
KEPT = 4096  # and at most this many of them (the newest)


class SpoolFile:
    """One worker's spool, read from where the last read stopped; a half-written frame waits."""

    def __init__(self, path: str | Path):
        self.paths = (partial_path(Path(path)), Path(path))  # written, then renamed when complete
        self._handle = None
        self._pending = b""

    def frames(self) -> list[list[tuple]]:
        if self._handle is None:
            for path in self.paths:
                try:
                    self._handle = open(path, "rb")  # noqa: SIM115 (held across reads; closed in close)
                    break
                except FileNotFoundError:
                    continue
            if self._handle is None:
                return []
        data = self._pending + self._handle.read()
        out, at = [], 0
        while len(data) - at >= _FRAME.size:
            (size,) = _FRAME.unpack_from(data, at)
            if len(data) - at - _FRAME.size < size:
                break
            out.append(marshal.loads(data[at + _FRAME.size : at + _FRAME.size + size]))
            at += _FRAME.size + size
        self._pending = data[at:]
        return out

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None


class Window:
    """Values of requests finished recently (monotonic ns), and the running count and sum of all."""

    def __init__(self):
        self.recent: deque[tuple[int, int]] = deque(maxlen=KEPT)  # (finished_ns, value_ns)
        self.count = 0
        self.sum_ns = 0

    def add(self, finished_ns: int, value_ns: int) -> None:
        self.recent.append((finished_ns, value_ns))
        self.count += 1
        self.sum_ns += value_ns

    def quantiles(self, qs: tuple[float, ...], now_ns: int) -> list[float]:
        """Seconds at each q (nearest rank) over the last WINDOW_NS; NaN when none finished in it."""
        values = sorted(v for t, v in self.recent if now_ns - t <= WINDOW_NS)
        if not values:
            return [float("nan")] * len(qs)
        return [values[min(len(values) - 1, int(q * len(values)))] / 1e9 for q in qs]


class SpoolTail:
    """Feeds TTFT and E2E of successful requests, and every error by kind, from a run's spools so far."""

    def __init__(self, paths, ttft: Window, e2e: Window, errors: Counter):
        self.files = [SpoolFile(p) for p in paths]
        self.ttft, self.e2e, self.errors = ttft, e2e, errors  # kept by the caller across runs

    def read(self) -> None:
        """Take in whatever the workers have spooled since the last call."""
        for spool in self.files:
            for frame in spool.frames():
                for values in frame:
                    self._add(outcome_of(values))

    def _add(self, outcome) -> None:
        if outcome is None:
            self.errors[SHED] += 1
        elif outcome.error_kind is not None:
            self.errors[outcome.error_kind] += 1
        elif outcome.e2e_ns is not None:
            finished_ns = outcome.sent_ns + outcome.e2e_ns
            self.e2e.add(finished_ns, outcome.e2e_ns)
            if outcome.ttft_ns is not None:
                self.ttft.add(finished_ns, outcome.ttft_ns)

    def close(self) -> None:
        self.read()
        for spool in self.files:
            spool.close()


def now_ns() -> int:
    return time.perf_counter_ns()  # the workers' clock (replayer.loop.clock): one monotonic clock per host
