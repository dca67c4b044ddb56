"""A worker never outlives its coordinator: no load on the target without a living replay.
PR_SET_PDEATHSIG on Linux plus a liveness pipe everywhere, checked again right before the clock
starts; neither is on the per-request path. Why both: docs/design/replay-loop.md."""

from __future__ import annotations

import ctypes
import os
import select
import signal
import sys

PR_SET_PDEATHSIG = 1
EXIT_ORPHANED = 3  # the worker's exit status when it stopped because its coordinator was gone
# "0" switches the parent-death signal off, so the liveness pipe alone stops orphans (as it does
# where there is no prctl, e.g. macOS); tests use it to exercise the portable path on Linux.
PDEATHSIG_ENV = "LLMREPLAY_WORKER_PDEATHSIG"


def die_with_parent() -> bool:
    """Ask the kernel to SIGKILL this process when its parent dies (Linux); True when armed."""
    if not sys.platform.startswith("linux") or os.environ.get(PDEATHSIG_ENV) == "0":
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return (
            libc.prctl(
                PR_SET_PDEATHSIG,
                ctypes.c_ulong(signal.SIGKILL),
                ctypes.c_ulong(0),
                ctypes.c_ulong(0),
                ctypes.c_ulong(0),
            )
            == 0
        )
    except (OSError, AttributeError):
        return False


def parent_gone(parent_pid: int, alive_fd: int) -> bool:
    """The coordinator is gone: this process was re-parented, or the liveness pipe is at EOF.

    (Nothing is ever written to the pipe, so readable means EOF.) Call after `die_with_parent`:
    a parent that dies after this check is caught by the signal or by the loop's reader."""
    if os.getppid() != parent_pid:
        return True
    readable, _, _ = select.select([alive_fd], [], [], 0)
    return bool(readable)


def say_orphaned(worker: int, parent_pid: int) -> None:
    """One line on stderr (inherited from the coordinator; it may be closed: then nothing)."""
    try:
        os.write(
            2,
            f"llmreplay: worker {worker}: the replay coordinator (pid {parent_pid}) is gone; "
            "stopped sending and exited\n".encode(),
        )
    except OSError:
        pass
