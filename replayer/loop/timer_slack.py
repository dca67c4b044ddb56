"""The pacing thread's timer slack at its minimum: Linux lets a sleeping thread's timers fire up to its
slack late (50 us by default) to batch wake-ups; a replay's send times should not pay that."""

from __future__ import annotations

import ctypes
import sys

PR_SET_TIMERSLACK = 29
PR_GET_TIMERSLACK = 30
MIN_SLACK_NS = 1  # 0 would mean "back to the default"


def tighten_timer_slack() -> int | None:
    """Set this thread's timer slack to 1 ns; returns the slack now in force (None where unsupported)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(
            PR_SET_TIMERSLACK,
            ctypes.c_ulong(MIN_SLACK_NS),
            ctypes.c_ulong(0),
            ctypes.c_ulong(0),
            ctypes.c_ulong(0),
        )
        slack = libc.prctl(
            PR_GET_TIMERSLACK, ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0)
        )
    except (OSError, AttributeError):
        return None
    return slack if slack >= 0 else None
