"""Real processes on 127.0.0.1 with free ports, always cleaned up: helpers shared by all test areas.

A module with its own name (not conftest) so test files can import it: several areas have a conftest.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from _support import free_port, wait_http_ok  # benchmarks/_support.py: one home for both

from llmreplay.processes import stop_process

__all__ = ["ProcessPool", "free_port", "llmreplay_cmd", "start_sim_process", "wait_http_ok"]

ROOT = Path(__file__).resolve().parent.parent
SHARED_TRACES = ROOT.parent / "shared" / "traces"


def llmreplay_cmd(*args: str) -> list[str]:
    """The CLI as a subprocess, with the interpreter running the tests."""
    return [sys.executable, "-m", "llmreplay.cli", *args]


class ProcessPool:
    """Starts processes for one test and stops every one of them at teardown."""

    def __init__(self, log_dir: Path):
        self.log_dir = log_dir
        self.procs: list[subprocess.Popen] = []

    def start(self, cmd: list[str], name: str, ready_url: str | None = None, env=None) -> subprocess.Popen:
        log = open(self.log_dir / f"{name}-{len(self.procs)}.log", "wb")
        proc = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, env={**os.environ, **(env or {})}
        )
        self.procs.append(proc)
        if ready_url:
            try:
                wait_http_ok(ready_url, proc=proc)
            except Exception:
                stop_process(proc)
                log.flush()
                raise RuntimeError(
                    f"{name} failed to start:\n{(self.log_dir / log.name).read_text()[-3000:]}"
                ) from None
        return proc

    def stop_all(self) -> None:
        for proc in reversed(self.procs):
            stop_process(proc)


def start_sim_process(pool: ProcessPool, *args: str, name: str = "sim") -> str:
    """A real `llmreplay sim` in `pool` on a free port; its base URL once /health answers."""
    port = free_port()
    cmd = llmreplay_cmd("sim", "--host", "127.0.0.1", "--port", str(port), *args)
    pool.start(cmd, name, ready_url=f"http://127.0.0.1:{port}/health")
    return f"http://127.0.0.1:{port}"
