"""Stopping a child process the way every stage expects: SIGTERM (so it drains and publishes its
files), then SIGKILL when it does not exit in time."""

from __future__ import annotations

import signal
import subprocess


def stop_process(proc: subprocess.Popen, grace_s: float = 10.0) -> int | None:
    """SIGTERM, wait `grace_s`, then SIGKILL; returns the exit status."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
    return proc.returncode
