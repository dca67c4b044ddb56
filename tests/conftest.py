"""Shared fixtures: real processes on 127.0.0.1 with free ports, always cleaned up; a sim in this process."""

from __future__ import annotations

import functools
import signal

import pytest
from live_processes import ProcessPool, start_sim_process

pytest_plugins = ["e2e_marker", "long_runs", "sim_fixtures", "pytester"]

# A suite started in the background by a non-interactive shell (CI scripts, nohup) inherits SIGINT
# ignored, and so would every process it starts: the Ctrl-C tests could not reach them. A handled
# signal is reset to the default at exec, so the children get Python's usual KeyboardInterrupt.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture
def processes(tmp_path):
    pool = ProcessPool(tmp_path)
    yield pool
    pool.stop_all()


@pytest.fixture
def start_sim(processes):
    """start(*flags, name="sim") -> base URL of a real `llmreplay sim` process on a free port."""
    return functools.partial(start_sim_process, processes)


@pytest.fixture
def start_sim_in_process():
    """start(profile=None, **SimConfig fields) -> a started InProcessSim (.url, .log_path) on port 0."""
    from in_process_sim import sims_in_process  # the sim's imports, only for the tests that use it

    with sims_in_process() as start:
        yield start
