"""A free port, and waiting for a started process to answer HTTP 200: for the benchmarks and the tests.

A benchmark runs as `python benchmarks/bench_x.py`, so this folder is on sys.path (pytest's pythonpath
names it too): `from _support import ...`.
"""

from __future__ import annotations

import socket
import subprocess
import time
import urllib.request
from pathlib import Path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_http_ok(
    url: str, proc: subprocess.Popen | None = None, timeout_s: float = 30.0, log: Path | None = None
) -> None:
    """Until `url` answers 200; RuntimeError when `proc` exits first, TimeoutError after `timeout_s`
    (both with the tail of `log`)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{url}: process exited with {proc.returncode}{_tail(log)}")
        try:
            with urllib.request.urlopen(url, timeout=1) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"{url} did not answer within {timeout_s:g}s{_tail(log)}")


def _tail(log: Path | None) -> str:
    if log is None or not log.is_file():
        return ""
    return ":\n" + log.read_text(errors="replace")[-2000:]
