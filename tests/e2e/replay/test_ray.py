"""`replay --ray`: a real local Ray cluster of several nodes on this machine (Ray's own multi-node test
cluster), one shard a node, merged like any multi-host replay; Ray only starts and collects each shard."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from replay_helpers import ROOT, results, run_info

from tests.e2e.replay.test_multihost import LOOSE_LAG, SESSIONS, TURNS, session_trace

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


def _cmdlines_holding(secret: str, but: int) -> list[str]:
    """Command lines of this machine's processes (except pid `but`) that hold `secret`."""
    found = []
    for proc in os.listdir("/proc"):
        if not proc.isdigit() or int(proc) == but:
            continue
        try:
            with open(f"/proc/{proc}/cmdline", "rb") as handle:
                line = handle.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if secret in line:
            found.append(line)
    return found


def test_keys_reach_the_nodes_through_the_environment_never_their_argv(tmp_path, ray_cluster, start_sim):
    """The API key from the driver's environment reaches every node (it did not: only argv went);
    a --header value given to the driver is in no node's process list (it was: the driver's argv)."""
    import threading
    import time

    trace = session_trace(tmp_path / "t.parquet")
    url = start_sim("--profile", "fast")
    out = tmp_path / "run"
    header_secret, key = "hdr-secret-4f1c9a", "sk-env-key-8d2e7b"
    cmd = [sys.executable, "-m", "llmreplay.cli", "replay", str(trace), "--target", url, "-o", str(out),
           "--ray", ray_cluster.address, "--shards", "2", "--quiet", "--header", f"x-api-key: {header_secret}",
           *LOOSE_LAG]  # fmt: skip
    env = {**os.environ, "LLMREPLAY_API_KEY": key}
    driver = subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    seen: list[str] = []
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            seen.extend(_cmdlines_holding(header_secret, driver.pid) + _cmdlines_holding(key, driver.pid))
            time.sleep(0.05)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        stdout, stderr = driver.communicate(timeout=240)
    finally:
        done.set()
        watcher.join(5)
    assert driver.returncode == 0, stdout + stderr
    assert not seen, seen
    for k in range(2):
        shard = run_info(out / "shards" / f"shard-{k}")
        assert shard["config"]["api_key_set"] is True, "the key from the environment reached node {k}"
        assert shard["config"]["headers"] == ["x-api-key"]
    for path in out.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert header_secret.encode() not in data and key.encode() not in data, path
