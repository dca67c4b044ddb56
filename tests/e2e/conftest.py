"""The replay end-to-end tests' fixtures: sims with their ground truth (helpers live in replay_helpers.py)."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest
from live_processes import ProcessPool, start_sim_process
from replay_helpers import stop_and_wait

from llmreplay.probe_ids import PROBE_ID_PREFIX


@pytest.fixture
def sim_with_truth(start_sim, processes, tmp_path):
    """Start a sim that logs ground truth; `truth()` stops it and returns the rows by request id
    (the replay's own: the probes and preflight requests left out)."""

    def start(*args: str):
        log = tmp_path / f"truth-{len(processes.procs)}.parquet"
        url = start_sim("--log", str(log), *args)
        proc = processes.procs[-1]

        def truth() -> dict[str, dict]:
            stop_and_wait(proc)
            rows = pq.read_table(log).to_pylist()
            return {r["request_id"]: r for r in rows if not r["request_id"].startswith(PROBE_ID_PREFIX)}

        return url, truth

    return start


@pytest.fixture(scope="module")
def shared_sim(tmp_path_factory):
    """One fast-profile sim for a whole module (starting a sim costs seconds); stopped at the end."""
    pool = ProcessPool(tmp_path_factory.mktemp("sim"))
    yield start_sim_process(pool, "--profile", "fast")
    pool.stop_all()
