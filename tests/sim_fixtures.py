"""Module-scoped sims (starting one loads the tokenizer, ~3 s): real processes stopped with SIGTERM, or in
this process. A plugin of tests/conftest.py: the sim tests and the sim's end-to-end tests share them."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from in_process_sim import sims_in_process
from live_processes import ProcessPool, start_sim_process

from llmreplay.processes import stop_process


@dataclass
class RunningSim:
    url: str
    log_path: Path
    proc: subprocess.Popen

    def stop(self) -> int:
        """SIGTERM and wait; returns the exit status."""
        return stop_process(self.proc, 15)


@pytest.fixture(scope="module")
def module_sim(tmp_path_factory):
    """start(*flags) -> RunningSim with a ground-truth log; every sim is stopped at module end."""
    pool = ProcessPool(tmp_path_factory.mktemp("sims"))

    def start(*flags: str) -> RunningSim:
        log_path = tmp_path_factory.mktemp("sim") / "gt.parquet"
        url = start_sim_process(pool, "--log", str(log_path), *flags)
        return RunningSim(url, log_path, pool.procs[-1])

    yield start
    pool.stop_all()


@pytest.fixture(scope="module")
def module_sim_in_process():
    """start(profile=None, **SimConfig fields) -> a started InProcessSim; all stopped at module end."""
    with sims_in_process() as start:
        yield start
