"""Shared fixtures: real processes on 127.0.0.1 with free ports, always cleaned up."""

from __future__ import annotations

import signal

import pytest
from live_processes import ProcessPool, free_port, llmreplay_cmd

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
def start_sim(processes, tmp_path):
    """Start a real `llmreplay sim` on a free port; returns its base URL (http://127.0.0.1:PORT)."""

    def start(*args: str, name: str = "sim") -> str:
        port = free_port()
        cmd = llmreplay_cmd("sim", "--host", "127.0.0.1", "--port", str(port), *args)
        processes.start(cmd, name, ready_url=f"http://127.0.0.1:{port}/health")
        return f"http://127.0.0.1:{port}"

    return start
