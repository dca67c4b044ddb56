"""End to end with real processes: one trace replayed against a fast and a slow `llmreplay sim`.

The slow profile's prefill costs 5x the fast one's, so compare must call TTFT a regression (exit 1).
"""

from __future__ import annotations

import json
import subprocess

import pytest
from compare_fixtures import Shape, latencies_ns, write_trace_file
from live_processes import free_port, llmreplay_cmd, wait_http_ok

pytestmark = pytest.mark.e2e  # every test here starts processes

SHAPE = Shape(n=40, seed=5, interval_ms=60.0, prompt_median_tokens=1500, max_prompt_tokens=4000)


def run_cli(*args: str, timeout_s: float = 90.0) -> subprocess.CompletedProcess:
    return subprocess.run(llmreplay_cmd(*args), capture_output=True, text=True, timeout=timeout_s)


def replay(trace, target: str, out) -> None:
    # The synthetic trace names models the sim does not serve; a generous lag bound: the box is shared.
    options = ("--model", "sim-model", "--quiet", "--max-dispatch-lag", "1s")
    done = run_cli("replay", str(trace), "--target", target, "-o", str(out), *options)
    assert (out / "results.parquet").is_file(), done.stderr[-2000:]


def start_sims_together(processes, profiles: tuple[str, ...]) -> list[str]:
    """Both sims boot at once (each takes seconds to load its tokenizer on a busy box)."""
    urls = []
    for profile in profiles:
        port = free_port()
        cmd = llmreplay_cmd("sim", "--host", "127.0.0.1", "--port", str(port), "--profile", profile)
        urls.append((f"http://127.0.0.1:{port}", processes.start(cmd, profile)))
    for url, proc in urls:
        wait_http_ok(f"{url}/health", timeout_s=60, proc=proc)
    return [url for url, _ in urls]


@pytest.mark.timeout(150)
def test_replays_against_fast_and_slow_sims_show_a_ttft_regression(processes, tmp_path):
    trace = write_trace_file(tmp_path / "trace.parquet", SHAPE, *latencies_ns(SHAPE, seed=1))
    fast, slow = start_sims_together(processes, ("fast", "slow"))
    replay(trace, fast, tmp_path / "run-fast")
    replay(trace, slow, tmp_path / "run-slow")

    # The fidelity lag bound is loosened like the replay's: other tests share the two cores.
    lag = ("--max-dispatch-lag", "1s")
    done = run_cli("compare", str(tmp_path / "run-fast"), str(tmp_path / "run-slow"), "--json", *lag)
    assert done.returncode == 1, done.stderr
    result = json.loads(done.stdout)
    assert result["common_requests"]["common"] == SHAPE.n
    assert result["latency"]["ttft"]["comparison"]["p50"]["verdict"] == "regression"
    assert result["latency"]["ttft"]["comparison"]["p50"]["ratio"] > 2
    assert not result["fidelity"]["unfaithful"], result["fidelity"]

    same = run_cli("compare", str(tmp_path / "run-fast"), str(tmp_path / "run-fast"), *lag)
    assert same.returncode == 0, same.stdout + same.stderr
