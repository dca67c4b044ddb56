"""`replay --ray`: a real local Ray cluster of several nodes on this machine (Ray's own multi-node test
cluster), one shard a node, merged like any multi-host replay; Ray only starts and collects each shard."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from replay_helpers import ROOT, results, run_info
from test_multihost_e2e import LOOSE_LAG, SESSIONS, TURNS, session_trace

ray_cluster_utils = pytest.importorskip(
    "ray.cluster_utils", reason="Ray is not installed (pip install '.[ray]')"
)

pytestmark = pytest.mark.e2e


@pytest.fixture
def ray_cluster():
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    cluster = ray_cluster_utils.Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 1, "include_dashboard": False},
    )
    cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    yield cluster
    cluster.shutdown()


def test_a_replay_on_two_ray_nodes_is_the_whole_trace_merged(tmp_path, ray_cluster, start_sim):
    trace = session_trace(tmp_path / "t.parquet")
    url = start_sim("--profile", "fast")
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "llmreplay.cli", "replay", str(trace), "--target", url, "-o", str(out),
           "--ray", ray_cluster.address, "--shards", "2", "--quiet", *LOOSE_LAG]  # fmt: skip
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = results(out)
    assert sorted(r["source_request_id"] for r in rows) == sorted(f"r{i}" for i in range(SESSIONS * TURNS))
    assert {r["shard"] for r in rows} == {0, 1}
    info = run_info(out)
    assert info["clock"]["within_budget"] and len(info["hosts"]) == 2
    assert (out / "shards" / "shard-0" / "run.json").is_file()
