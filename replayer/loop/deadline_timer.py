"""Wake-ups at monotonic deadlines to the tens of microseconds, without spinning the event loop: one
Linux timerfd armed at the earliest deadline; elsewhere `DeadlineTimer.create` returns None and the
caller keeps the timer-then-yield wait. Why: docs/design/replay-loop.md."""

from __future__ import annotations

import asyncio
import ctypes
import heapq
import os
import sys
import time

_CLOCK_MONOTONIC = 1
_TFD_TIMER_ABSTIME = 1
_PR_SET_TIMERSLACK = 29


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


class DeadlineTimer:
    """`await wait_until(ns)` for any number of waiters on one timerfd (a heap of deadlines)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, libc, fd: int):
        self._loop = loop
        self._libc = libc
        self._fd = fd
        self._heap: list[tuple[int, int, asyncio.Future]] = []  # (deadline, tie-break, waiter)
        self._count = 0
        self._armed_ns: int | None = None
        loop.add_reader(fd, self._expired)

    @classmethod
    def create(cls, loop: asyncio.AbstractEventLoop) -> DeadlineTimer | None:
        """A timer on this loop, or None where timerfd is not available (not Linux)."""
        if not sys.platform.startswith("linux"):
            return None
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            fd = libc.timerfd_create(_CLOCK_MONOTONIC, os.O_NONBLOCK | os.O_CLOEXEC)
        except (OSError, AttributeError):
            return None
        if fd < 0:
            return None
        libc.prctl(
            _PR_SET_TIMERSLACK, ctypes.c_ulong(1), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0)
        )  # expiries to the microsecond, not 50 us late
        return cls(loop, libc, fd)

    async def wait_until(self, due_ns: int) -> None:
        """Return at `due_ns` (time.perf_counter_ns), or at once when it has passed."""
        if due_ns <= time.perf_counter_ns():
            return
        waiter = self._loop.create_future()
        heapq.heappush(self._heap, (due_ns, self._count, waiter))
        self._count += 1
        if self._armed_ns is None or due_ns < self._armed_ns:
            self._arm(due_ns)
        await waiter  # a cancelled waiter stays in the heap until its time and is skipped then

    def _arm(self, due_ns: int) -> None:
        value = _Itimerspec(_Timespec(0, 0), _Timespec(due_ns // 1_000_000_000, due_ns % 1_000_000_000))
        if self._libc.timerfd_settime(self._fd, _TFD_TIMER_ABSTIME, ctypes.byref(value), None) != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, f"timerfd_settime: {os.strerror(errno)}")
        self._armed_ns = due_ns

    def _expired(self) -> None:
        try:
            os.read(self._fd, 8)
        except BlockingIOError:
            pass  # re-armed since it expired: nothing to read
        now = time.perf_counter_ns()
        heap = self._heap
        while heap and heap[0][0] <= now:
            waiter = heapq.heappop(heap)[2]
            if not waiter.done():
                waiter.set_result(None)
        self._armed_ns = None
        if heap:
            self._arm(heap[0][0])

    def close(self) -> None:
        self._loop.remove_reader(self._fd)
        os.close(self._fd)
        for _, _, waiter in self._heap:
            waiter.cancel()
        self._heap.clear()
