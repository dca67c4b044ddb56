"""A fake replayer.loop.clock.Clock that advances when the code waits: virtual nanoseconds that jump
to the earliest wait or timer once the event loop has no ready I/O. Real sockets on 127.0.0.1 keep
working (a loopback write is readable at once), so no wait is skipped while bytes are on their way."""

from __future__ import annotations

import asyncio
import heapq
import itertools
import selectors


class FakeTimer:
    __slots__ = ("callback", "args", "cancelled")

    def __init__(self, callback, args):
        self.callback, self.args, self.cancelled = callback, args, False

    def cancel(self) -> None:
        self.cancelled = True

    def fire(self) -> None:
        if not self.cancelled:
            self.callback(*self.args)


class FakeClock:
    wake_lateness_ns = 0  # a wait returns at its deadline exactly: nothing to yield for

    def __init__(self, start_ns: int = 0):
        self.now = start_ns
        self._due: list[tuple[int, int, FakeTimer]] = []
        self._order = itertools.count()

    def now_ns(self) -> int:
        return self.now

    async def wait_until(self, due_ns: int) -> None:
        if due_ns <= self.now:
            return
        waiter = asyncio.get_running_loop().create_future()
        self._push(due_ns, FakeTimer(_wake, (waiter,)))
        await waiter

    def call_later(self, delay_ns: int, callback, *args) -> FakeTimer:
        timer = FakeTimer(callback, args)
        self._push(self.now + max(0, delay_ns), timer)
        return timer

    def close(self) -> None:
        pass

    def _push(self, due_ns: int, timer: FakeTimer) -> None:
        heapq.heappush(self._due, (due_ns, next(self._order), timer))

    def jump(self, loop: asyncio.AbstractEventLoop) -> bool:
        """Move to the earliest live deadline and queue what falls due on the loop; False when none."""
        due = self._due
        while due and due[0][2].cancelled:
            heapq.heappop(due)
        if not due:
            return False
        self.now = due[0][0]
        while due and due[0][0] <= self.now:
            loop.call_soon(heapq.heappop(due)[2].fire)
        return True


def _wake(waiter: asyncio.Future) -> None:
    if not waiter.done():
        waiter.set_result(None)


class _JumpingSelector(selectors.DefaultSelector):
    """Polls without blocking; when nothing is ready and the loop would wait, the fake clock jumps."""

    def __init__(self, clock: FakeClock):
        super().__init__()
        self.clock = clock
        self.loop: asyncio.AbstractEventLoop | None = None

    def select(self, timeout=None):
        ready = super().select(0)
        if ready or timeout == 0:
            return ready
        if self.clock.jump(self.loop):
            return []  # what fell due is queued on the loop
        return super().select(timeout)


def run_on_fake_clock(main, clock: FakeClock, real_timeout_s: float = 20.0):
    """asyncio.run(main()) on a loop whose idle waits jump `clock`; a hang fails after real seconds."""

    def loop_factory() -> asyncio.AbstractEventLoop:
        selector = _JumpingSelector(clock)
        selector.loop = asyncio.SelectorEventLoop(selector)
        return selector.loop

    async def bounded():
        async with asyncio.timeout(real_timeout_s):  # the loop's own timers stay on real time
            return await main()

    return asyncio.run(bounded(), loop_factory=loop_factory)
