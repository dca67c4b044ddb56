"""A capacity search killed mid-step (SIGKILL) continues from its finished steps on a rerun and reaches
the same answer as an uninterrupted search; Ctrl-C (SIGINT) mid-step writes capacity.json, exit 130."""

from __future__ import annotations

import json
import signal
import subprocess
import time

import pytest
from capacity_support import STEP_FLAGS, capacity_cmd, even_trace, run_capacity
from live_processes import ROOT

SEARCH = (*STEP_FLAGS, "--by", "speed", "--max-steps", "3")
WAIT_S = 60.0


def wait_for(condition, proc: subprocess.Popen) -> None:
    """Poll `condition()` until true (bounded); the process must still be running."""
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert proc.poll() is None, "capacity ended before the moment the test waits for"
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.05)


def step_dirs(out) -> list[str]:
    steps = out / "steps"
    return sorted(p.name for p in steps.iterdir()) if steps.is_dir() else []


def finished_steps(out) -> int:
    path = out / "capacity.json"
    return len(json.loads(path.read_bytes())["steps"]) if path.is_file() else 0


@pytest.mark.e2e
def test_a_killed_search_resumes_from_its_finished_steps_to_the_same_answer(tmp_path, sim, processes):
    trace = even_trace(tmp_path / "trace.parquet")
    out = tmp_path / "cap"
    proc = processes.start(capacity_cmd(trace, sim, out, *SEARCH), "capacity")
    wait_for(lambda: finished_steps(out) == 1 and len(step_dirs(out)) == 2, proc)
    time.sleep(0.5)  # into step 1's replay
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    assert finished_steps(out) == 1
    resumed = run_capacity(trace, sim, out, *SEARCH)
    reference = run_capacity(trace, sim, tmp_path / "ref", *SEARCH)
    doc, ref = json.loads(resumed.stdout), json.loads(reference.stdout)
    assert [s["reused"] for s in doc["steps"]] == [True, False, False]
    assert [s["factor"] for s in doc["steps"]] == [s["factor"] for s in ref["steps"]]
    assert [s["verdict"] for s in doc["steps"]] == [s["verdict"] for s in ref["steps"]]
    assert doc["slo_limit"] == ref["slo_limit"] and doc["stop_reason"] == ref["stop_reason"] == "max_steps"
    assert resumed.returncode == reference.returncode


@pytest.mark.e2e
def test_ctrl_c_mid_step_writes_capacity_json_interrupted_exit_130(tmp_path, sim):
    trace = even_trace(tmp_path / "trace.parquet")
    out = tmp_path / "cap"
    proc = subprocess.Popen(
        capacity_cmd(trace, sim, out, *SEARCH), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        wait_for(
            lambda: len(step_dirs(out)) == 1 and (out / "steps" / step_dirs(out)[0] / ".parts").exists(), proc
        )
        time.sleep(1.0)  # requests in flight
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, stderr.decode()[-2000:]
    doc = json.loads((out / "capacity.json").read_bytes())
    assert doc["stop_reason"] == "interrupted" and doc["verdict"]["exit_code"] == 130
    assert "interrupted" in stderr.decode() and "Traceback" not in stderr.decode()
