"""The real clock of the loop: perf_counter_ns, a wait that never returns before its deadline (and
at most its lateness cap after it on an idle loop), timers in nanoseconds."""

from __future__ import annotations

import asyncio
import time

from replayer.loop.clock import SystemClock

MS = 1_000_000


def test_waits_and_timers_keep_their_deadlines_on_perf_counter_ns():
    async def main():
        clock = SystemClock(asyncio.get_running_loop())
        assert clock.now_ns is time.perf_counter_ns
        late_ns = []
        for _ in range(5):
            due = clock.now_ns() + 3 * MS
            await clock.wait_until(due)
            late_ns.append(clock.now_ns() - due)
        fired = asyncio.get_running_loop().create_future()
        started = clock.now_ns()
        clock.call_later(5 * MS, fired.set_result, "fired")
        clock.call_later(1 * MS, fired.set_result, "cancelled").cancel()
        assert await fired == "fired" and clock.now_ns() - started >= 4 * MS
        await clock.wait_until(clock.now_ns() - MS)  # a deadline gone: at once
        clock.close()
        return late_ns

    late_ns = asyncio.run(main())
    assert min(late_ns) >= 0
    assert sorted(late_ns)[2] < 20 * MS  # the median wake-up, on a loaded 2-core machine
