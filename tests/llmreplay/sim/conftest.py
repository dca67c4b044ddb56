"""Module-scoped real sims (starting one loads the tokenizer, ~3 s), stopped with SIGTERM."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

from llmreplay.processes import stop_process

ROOT = Path(__file__).resolve().parents[3]


@dataclass
class RunningSim:
    url: str
    log_path: Path
    proc: subprocess.Popen
    output: Path

    def stop(self) -> int:
        """SIGTERM and wait; returns the exit status."""
        return stop_process(self.proc, 15)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_healthy(sim: RunningSim, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if sim.proc.poll() is not None:
            raise RuntimeError(f"sim exited early:\n{sim.output.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"{sim.url}/health", timeout=1) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError("sim did not become healthy")


@pytest.fixture(scope="module")
def module_sim(tmp_path_factory):
    """start(*flags) -> RunningSim with a ground-truth log; every sim is stopped at module end."""
    sims: list[RunningSim] = []

    def start(*flags: str) -> RunningSim:
        tmp = tmp_path_factory.mktemp("sim")
        port = _free_port()
        output = tmp / "sim.out"
        cmd = [sys.executable, "-m", "llmreplay.cli", "sim", "--host", "127.0.0.1", "--port", str(port)]
        cmd += ["--log", str(tmp / "gt.parquet"), *flags]
        with open(output, "wb") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
        sim = RunningSim(f"http://127.0.0.1:{port}", tmp / "gt.parquet", proc, output)
        sims.append(sim)
        _wait_healthy(sim)
        return sim

    yield start
    for sim in sims:
        sim.stop()
