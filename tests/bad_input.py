"""The bad-input rule as a test helper: exit status 2, one line on stderr, no traceback, nothing left.

Shared by the test areas (a module of its own, like live_processes: several areas have a conftest.py).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from live_processes import ROOT, llmreplay_cmd


def run_cli(*args: str, timeout_s: float = 60, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(llmreplay_cmd(*args), capture_output=True, text=True, timeout=timeout_s, cwd=cwd)


def assert_refused(done: subprocess.CompletedProcess, *expected: str, code: int = 2) -> str:
    """The one stderr line of a refused command (checked); `expected` must all appear in it."""
    lines = done.stderr.splitlines()
    assert done.returncode == code, (done.returncode, done.stderr[-2000:])
    assert "Traceback" not in done.stderr, done.stderr
    assert len(lines) == 1, done.stderr
    for text in expected:
        assert text in lines[0], (text, lines[0])
    return lines[0]


def refused(*args: str, expected: tuple[str, ...] = (), timeout_s: float = 60, cwd: Path = ROOT) -> str:
    return assert_refused(run_cli(*args, timeout_s=timeout_s, cwd=cwd), *expected)


def leftovers(directory: Path) -> list[Path]:
    """Temporary files a writer left behind (`.NAME.tmp-PID`)."""
    return sorted(p for p in directory.rglob(".*.tmp-*"))
