"""A replay against `llmreplay sim`, watched and recorded by a real Prometheus 2.42 and Pushgateway:
Prometheus scrapes --metrics-port during the run, the finished run is pushed to the Pushgateway (which
Prometheus scrapes) and sent by remote-write, and what Prometheus's HTTP API answers is checked against
results.parquet. promtool lints the live exposition. Skips when tests/prometheus_setup.py has not run."""

from __future__ import annotations

import subprocess
import time
import urllib.request

import numpy as np
import pyarrow.parquet as pq
import pytest
from live_processes import free_port, start_sim_process
from prometheus_servers import binary, promtool_check, query, start_prometheus, start_pushgateway, wait_for
from replay_helpers import ROOT, content_record, replay_cmd, run_info, write_content_trace

from llmreplay.metrics import per_request_latencies_ns
from replayer.results.summary import measured_rows

pytestmark = pytest.mark.e2e
REQUESTS = 60
SPACING_MS = 80.0  # ~5 s of trace: a few scrapes at 1 s


def _scrape(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.read().decode()
    except OSError:
        return None


def _value(found: list[dict]) -> float:
    assert len(found) == 1, found
    return float(found[0]["value"][1])


def test_prometheus_scrapes_the_live_run_and_receives_the_finished_one(tmp_path, processes):
    for name in ("prometheus", "prometheus-pushgateway", "promtool"):
        binary(name)  # skip before anything starts
    target = start_sim_process(processes, "--profile", "fast")
    gateway = start_pushgateway(processes)
    metrics_port = free_port()
    prometheus = start_prometheus(
        processes,
        tmp_path / "prometheus",
        {"pushgateway": gateway.removeprefix("http://"), "llmreplay": f"127.0.0.1:{metrics_port}"},
    )
    records = [content_record(i, i * SPACING_MS) for i in range(REQUESTS)]
    trace = write_content_trace(tmp_path / "trace.parquet", records)
    out = tmp_path / "nightly"
    cmd = replay_cmd(
        trace,
        target,
        out,
        "--skip-preflight",
        "--metrics-port",
        str(metrics_port),
        "--pushgateway",
        gateway,
        "--remote-write",
        f"{prometheus}/api/v1/write",
    )
    replay = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    processes.procs.append(replay)
    live_bodies = []
    deadline = time.monotonic() + 60
    while replay.poll() is None and time.monotonic() < deadline:  # bounded: the run is ~5 s
        body = _scrape(f"http://127.0.0.1:{metrics_port}/metrics")
        if body and "llmreplay_requests_sent_total{" in body:
            live_bodies.append(body)
        time.sleep(0.5)
    stdout, stderr = replay.communicate(timeout=60)
    verdict_code = run_info(out)["summary"]["verdict"]["exit_code"]
    assert replay.returncode == verdict_code, stderr[-2000:]
    assert "warning:" not in stderr, stderr  # both pushes went through

    # live: scraped by us (linted by promtool) and by Prometheus during the run
    assert live_bodies, "never scraped the live metrics during the run"
    lint = promtool_check(live_bodies[-1])
    assert lint.returncode == 0 and not lint.stdout.strip() and not lint.stderr.strip(), lint
    run = 'run="nightly",engine="vllm",model="sim-model"'
    sent_live = wait_for(
        prometheus, f'max_over_time(llmreplay_requests_sent_total{{job="llmreplay",{run}}}[5m])'
    )
    assert 0 < _value(sent_live) <= REQUESTS
    assert wait_for(prometheus, f'llmreplay_load_factor{{job="llmreplay",axis="speed",{run}}}[5m]')
    target_label = target.removeprefix("http://")
    labels = query(prometheus, f'llmreplay_requests_planned{{job="llmreplay",{run}}}[5m]')[0]["metric"]
    assert labels["target"] == f"http://{target_label}"

    # finished: the same figures through the Pushgateway and by remote-write, against results.parquet
    table = pq.read_table(out / "results.parquet")
    sent = table.filter(table.column("sent_offset_ns").is_valid())
    ok_e2e = per_request_latencies_ns(measured_rows(sent))["e2e"]
    ok_e2e = ok_e2e[np.isfinite(ok_e2e)]
    ttft = per_request_latencies_ns(measured_rows(sent))["ttft"]
    ttft = ttft[np.isfinite(ttft)]
    for where in (f'job="pushgateway",exported_job="llmreplay",{run}', f'job="llmreplay",{run}'):
        assert _value(wait_for(prometheus, f"llmreplay_run_requests_sent_total{{{where}}}")) == sent.num_rows
        assert _value(wait_for(prometheus, f"llmreplay_run_requests_planned{{{where}}}")) == REQUESTS
        e2e_p50 = _value(wait_for(prometheus, f"llmreplay_run_e2e_p50_seconds{{{where}}}"))
        assert e2e_p50 == pytest.approx(np.percentile(ok_e2e, 50) / 1e9, rel=1e-9)
        ttft_p99 = _value(wait_for(prometheus, f"llmreplay_run_ttft_p99_seconds{{{where}}}"))
        assert ttft_p99 == pytest.approx(np.percentile(ttft, 99) / 1e9, rel=1e-9)
        count = _value(wait_for(prometheus, f"llmreplay_run_e2e_samples{{{where}}}"))
        assert count == len(ok_e2e)
        verdict = wait_for(prometheus, f"llmreplay_run_verdict{{{where}}}")
        assert verdict[0]["metric"]["status"] == run_info(out)["summary"]["verdict"]["status"]
    everything = query(prometheus, '{__name__=~"llmreplay_.+"}')
    assert all("Bearer" not in value for series in everything for value in series["metric"].values())
