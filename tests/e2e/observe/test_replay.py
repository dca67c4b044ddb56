"""`replay --metrics-port` against the sim: /metrics answers during the run with counters that only grow
and the run's labels; a push that cannot reach its target is one warning line and the exit status stays
the verdict's."""

from __future__ import annotations

import subprocess
import time
import urllib.request

import pytest
from live_processes import free_port, start_sim_process
from replay_helpers import ROOT, content_record, replay_cmd, results, run_info, write_content_trace

pytestmark = pytest.mark.e2e


def _sample(body: str, name: str) -> float | None:
    line = next((line for line in body.splitlines() if line.startswith(name + "{")), None)
    return None if line is None else float(line.rsplit(" ", 1)[1])


def test_live_metrics_during_the_run_and_a_failed_push_is_a_warning(tmp_path, processes):
    target = start_sim_process(processes, "--profile", "fast")
    trace = write_content_trace(tmp_path / "t.parquet", [content_record(i, i * 50.0) for i in range(50)])
    port, closed = free_port(), free_port()
    cmd = replay_cmd(
        trace,
        target,
        tmp_path / "run",
        "--skip-preflight",
        "--metrics-port",
        str(port),
        "--pushgateway",
        f"http://127.0.0.1:{closed}/",
    )
    replay = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    processes.procs.append(replay)
    sent = []
    deadline = time.monotonic() + 60
    while replay.poll() is None and time.monotonic() < deadline:  # the run is ~2.5 s
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
                body = response.read().decode()
        except OSError:
            body = ""
        if (value := _sample(body, "llmreplay_requests_sent_total")) is not None:
            sent.append(value)
            assert 'run="run"' in body and f'target="{target}"' in body and 'engine="vllm"' in body
        time.sleep(0.2)
    _, stderr = replay.communicate(timeout=60)
    assert replay.returncode == run_info(tmp_path / "run")["summary"]["verdict"]["exit_code"]
    warnings = [line for line in stderr.splitlines() if "warning:" in line]
    assert len(warnings) == 1 and warnings[0].startswith(
        f"warning: --pushgateway http://127.0.0.1:{closed}: not sent"
    )
    assert len(sent) >= 3 and sent == sorted(sent) and sent[-1] <= len(results(tmp_path / "run"))
