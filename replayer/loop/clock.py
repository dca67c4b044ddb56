"""The loop's time: monotonic nanoseconds, waits until a deadline, timers. The Runner and its reads
take it as a seam; SystemClock is the real one, tests pass a fake that jumps when the loop waits."""

from __future__ import annotations

import asyncio
import time
from typing import Protocol

from replayer.loop.deadline_timer import DeadlineTimer

TIMERFD_EARLY_WAKE_NS = 250_000  # a timerfd wake-up's p99 lateness on a 2-vCPU VM was 0.23 ms
LOOP_TIMER_LATENESS_NS = 1 << 62  # the loop's timers are late by up to a millisecond: no cap


class Timer(Protocol):
    def cancel(self) -> None: ...


class Clock(Protocol):
    """`now_ns` and `wait_until` are called per request: plain attributes (no wrapper in between).
    `wake_lateness_ns` caps how early the runner wakes before a deadline to yield until it."""

    wake_lateness_ns: int

    def now_ns(self) -> int: ...

    async def wait_until(self, due_ns: int) -> None: ...

    def call_later(self, delay_ns: int, callback, *args) -> Timer: ...

    def close(self) -> None: ...


class SystemClock:
    """time.perf_counter_ns; waits on a timerfd where Linux has one (DeadlineTimer), else the loop's timers."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self._loop = loop
        self.now_ns = time.perf_counter_ns
        self._timer = DeadlineTimer.create(loop)
        if self._timer is not None:
            self.wait_until = self._timer.wait_until
            self.wake_lateness_ns = TIMERFD_EARLY_WAKE_NS
        else:
            self.wait_until = self._sleep_until
            self.wake_lateness_ns = LOOP_TIMER_LATENESS_NS

    async def _sleep_until(self, due_ns: int) -> None:
        await asyncio.sleep(max(0, due_ns - time.perf_counter_ns()) / 1e9)

    def call_later(self, delay_ns: int, callback, *args) -> asyncio.TimerHandle:
        return self._loop.call_later(delay_ns / 1e9, callback, *args)

    def close(self) -> None:
        if self._timer is not None:
            self._timer.close()
