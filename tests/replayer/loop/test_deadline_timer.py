"""The timerfd deadline timer: every waiter wakes at or after its deadline, in deadline order,
whatever order they were armed in; cancelled waiters do not hold up the others."""

from __future__ import annotations

import asyncio
import sys
import time

import pytest
import uvloop

from replayer.loop.deadline_timer import DeadlineTimer

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="timerfd is Linux-only")


def test_waiters_wake_at_or_after_their_deadlines_in_order():
    async def main():
        timer = DeadlineTimer.create(asyncio.get_running_loop())
        assert timer is not None
        base = time.perf_counter_ns() + 20_000_000
        deadlines = [base + k * 3_000_000 for k in (5, 0, 3, 1, 4, 2)]  # armed out of order
        woke: list[tuple[int, int]] = []

        async def wait(due: int) -> None:
            await timer.wait_until(due)
            woke.append((due, time.perf_counter_ns()))

        late = asyncio.ensure_future(wait(base + 1_000_000))
        await asyncio.sleep(0)
        late.cancel()  # a cancelled waiter is skipped, not a stall for the others
        await asyncio.gather(*(wait(d) for d in deadlines))
        await timer.wait_until(time.perf_counter_ns() - 1)  # a deadline in the past returns at once
        timer.close()
        return woke

    woke = uvloop.run(main())
    assert [due for due, _ in woke] == sorted(due for due, _ in woke)
    assert all(at >= due for due, at in woke)
    assert len(woke) == 6


def test_an_earlier_deadline_rearms_the_timer():
    async def main():
        timer = DeadlineTimer.create(asyncio.get_running_loop())
        far = asyncio.ensure_future(timer.wait_until(time.perf_counter_ns() + 5_000_000_000))
        await asyncio.sleep(0)
        due = time.perf_counter_ns() + 10_000_000
        await asyncio.wait_for(timer.wait_until(due), 2)  # not held back by the 5 s deadline armed first
        woke = time.perf_counter_ns()
        far.cancel()
        timer.close()
        return due, woke

    due, woke = uvloop.run(main())
    assert woke >= due
