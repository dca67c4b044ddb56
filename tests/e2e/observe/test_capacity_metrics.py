"""`capacity --metrics-port --pushgateway` against the sim: one endpoint for the whole search whose
counters carry on across the steps while llmreplay_load_factor follows them, and each step's run pushed
to a real Pushgateway as its own group (run="<DIR>/<step>"). Skips without the Pushgateway binary."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request

import pytest
from live_processes import ROOT, free_port, llmreplay_cmd, start_sim_process
from prometheus_servers import binary, start_pushgateway
from replay_helpers import content_record, write_content_trace

pytestmark = pytest.mark.e2e


def _samples(body: str, name: str) -> list[tuple[str, float]]:
    return [
        (line.split("{", 1)[1].rsplit("}", 1)[0], float(line.rsplit(" ", 1)[1]))
        for line in body.splitlines()
        if line.startswith(name + "{")
    ]


def test_one_live_endpoint_across_the_steps_and_each_step_pushed(tmp_path, processes):
    binary("prometheus-pushgateway")
    target = start_sim_process(processes, "--profile", "fast")
    gateway = start_pushgateway(processes)
    records = [content_record(i, i * 100.0) for i in range(60)]  # 6 s at 10 req/s
    trace = write_content_trace(tmp_path / "t.parquet", records)
    port = free_port()
    flags = ["--skip-preflight", "--window", "3s", "--warmup", "1s", "--by", "speed", "--max-steps", "2"]
    flags += ["--max-dispatch-lag", "50ms", "--metrics-port", str(port), "--pushgateway", gateway]
    cmd = llmreplay_cmd("capacity", str(trace), "--target", target, "-o", str(tmp_path / "cap"), *flags)
    search = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    processes.procs.append(search)
    factors, sent = set(), []
    deadline = time.monotonic() + 120
    while search.poll() is None and time.monotonic() < deadline:  # two steps of ~5 s each
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
                body = response.read().decode()
        except OSError:
            body = ""
        for labels, value in _samples(body, "llmreplay_load_factor"):
            if 'axis="speed"' in labels:
                assert 'run="cap"' in labels
                factors.add(value)
        sent += [value for _, value in _samples(body, "llmreplay_requests_sent_total")]
        time.sleep(0.25)
    _, stderr = search.communicate(timeout=60)
    assert search.returncode in (0, 1), stderr[-2000:]
    assert "warning:" not in stderr, stderr
    assert factors == {1.0, 2.0}
    assert sent == sorted(sent) and sent[-1] > 0  # a counter: it never went back at the second step
    with urllib.request.urlopen(f"{gateway}/api/v1/metrics", timeout=5) as response:
        groups = json.load(response)["data"]
    runs = sorted(group["labels"]["run"] for group in groups)
    assert runs == ["cap/00-x1", "cap/01-x2"]
