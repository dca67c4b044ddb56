"""A worker's helper threads (request reader, result writer) never hold the CPU against its loop:
under a real-time policy they drop to SCHED_OTHER; otherwise nothing changes.
Measured: docs/design/replay-loop.md#helper-threads-yield-to-the-loop-helper_threadspy."""

from __future__ import annotations

import os


def yield_to_loop() -> None:
    """Call first thing in a helper thread: leave a real-time policy inherited from the process."""
    if not hasattr(os, "sched_getscheduler"):
        return
    try:
        if os.sched_getscheduler(0) in (os.SCHED_FIFO, os.SCHED_RR):
            os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))  # this thread only (Linux)
    except OSError:
        pass  # not permitted: keep the inherited policy
