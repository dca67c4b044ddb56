"""Fixtures of the replayer tests (helpers live in replay_helpers.py)."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest
from replay_helpers import stop_and_wait


@pytest.fixture
def sim_with_truth(start_sim, processes, tmp_path):
    """Start a sim that logs ground truth; `truth()` stops it and returns the rows by request id."""

    def start(*args: str):
        log = tmp_path / f"truth-{len(processes.procs)}.parquet"
        url = start_sim("--log", str(log), *args)
        proc = processes.procs[-1]

        def truth() -> dict[str, dict]:
            stop_and_wait(proc)
            return {row["request_id"]: row for row in pq.read_table(log).to_pylist()}

        return url, truth

    return start


@pytest.fixture(scope="module")
def shared_sim(tmp_path_factory):
    """One fast-profile sim for a whole module (starting a sim costs seconds); stopped at the end."""
    import subprocess
    import sys
    import urllib.request

    from replay_helpers import ROOT
    from tests_free_port import free_port_number

    port = free_port_number()
    log = open(tmp_path_factory.mktemp("sim") / "sim.log", "wb")
    cmd = [
        sys.executable,
        "-m",
        "llmreplay.cli",
        "sim",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--profile",
        "fast",
    ]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            if proc.poll() is not None:
                raise RuntimeError(f"sim exited with {proc.returncode}")
            try:
                with urllib.request.urlopen(url + "/health", timeout=1) as response:
                    if response.status == 200:
                        break
            except OSError:
                import time

                time.sleep(0.1)
        yield url
    finally:
        stop_and_wait(proc)
        log.close()
