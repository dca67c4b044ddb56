"""Real processes on 127.0.0.1 with free ports, always cleaned up: helpers shared by all test areas.

A module with its own name (not conftest) so test files can import it: several areas have a conftest.py.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from llmreplay.processes import stop_process

ROOT = Path(__file__).resolve().parent.parent
SHARED_TRACES = ROOT.parent / "shared" / "traces"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def llmreplay_cmd(*args: str) -> list[str]:
    """The CLI as a subprocess, with the interpreter running the tests."""
    return [sys.executable, "-m", "llmreplay.cli", *args]


def wait_http_ok(url: str, timeout_s: float = 20.0, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before {url} answered")
        try:
            with urllib.request.urlopen(url, timeout=1) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"{url} did not answer 200 within {timeout_s}s")


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
