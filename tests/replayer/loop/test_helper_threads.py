"""A worker's helper threads leave a real-time policy inherited from the process (the loop keeps it)."""

from __future__ import annotations

import os
import threading

import pytest

from replayer.loop.helper_threads import yield_to_loop


def test_a_helper_thread_leaves_sched_fifo_and_the_main_thread_keeps_its_policy():
    main_policy = os.sched_getscheduler(0)
    seen: dict = {}

    def helper():
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))  # as inherited under chrt/--rt
        except PermissionError:
            seen["skip"] = True
            return
        seen["before"] = os.sched_getscheduler(0)
        yield_to_loop()
        seen["after"] = os.sched_getscheduler(0)

    thread = threading.Thread(target=helper)
    thread.start()
    thread.join()
    if seen.get("skip"):
        pytest.skip("setting SCHED_FIFO is not permitted here")
    assert (seen["before"], seen["after"]) == (os.SCHED_FIFO, os.SCHED_OTHER)
    assert os.sched_getscheduler(0) == main_policy
