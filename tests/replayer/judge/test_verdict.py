"""The replay's own verdict: the checks `report` makes, the planned requests it never sent counted as
unsent, "interrupted after N of M", and one line under --quiet."""

from __future__ import annotations

import io
import json
import signal
import subprocess
import time

import pytest
from replay_helpers import ROOT, content_record, replay_cmd, results_table, run_info, write_content_trace
from rich.console import Console

from replayer.judge.gate_limits import FidelityLimits
from replayer.results.summary import print_summary, print_verdict, summarize


def printed(printer, summary: dict) -> str:
    buffer = io.StringIO()
    printer(summary, Console(file=buffer, width=200))
    return buffer.getvalue()


def test_interrupted_run_counts_the_requests_it_never_sent():
    summary = summarize(results_table(48), never_attempted=12, stop_reason="interrupted")
    assert summary["planned"] == 60 and summary["sent"] == 48
    assert summary["verdict"]["exit_code"] == 1
    assert summary["verdict"]["headline"] == (
        "FAIL: replay not faithful: interrupted after 48 of 60 requests; 12 of 60 requests not sent (20.0% > 1%)"
    )
    text = printed(print_summary, summary)
    assert "sent 48 of 60," in text and "interrupted after 48 of 60 requests" in text
    assert text.rstrip().splitlines()[-1] == summary["verdict"]["headline"]
    assert printed(print_verdict, summary).count("\n") == 1


def test_complete_and_healthy_run_passes():
    summary = summarize(results_table(20), stop_reason="completed")
    assert summary["verdict"]["headline"] == "PASS: error rate 0.0% ≤ 1%; replay faithful"
    assert summary["verdict"]["exit_code"] == 0


def test_every_request_failing_fails_the_replay():
    failed = results_table(
        10, http_status=503, error_kind="http_5xx", error_detail='{"error": "overloaded"}', ttft_ns=None
    )
    summary = summarize(failed, stop_reason="completed")
    assert summary["verdict"]["exit_code"] == 1
    assert summary["top_errors"] == [
        {"kind": "http_5xx", "status": 503, "message": "overloaded", "count": 10}
    ]
    assert "10 x http_5xx 503: overloaded" in printed(print_summary, summary)
    assert summarize(failed, max_error_rate=1.0, stop_reason="completed")["verdict"]["reasons"] == [
        "run: no successful request (10 sent or planned)"
    ]


def test_the_lag_limit_is_the_one_compare_uses():
    late = results_table(20, dispatch_lag_ns=9_020_000)
    assert (
        "dispatch lag p99 9.02 ms > 5 ms" in summarize(late, stop_reason="completed")["verdict"]["headline"]
    )
    relaxed = summarize(late, FidelityLimits(max_dispatch_lag_p99_ns=10_000_000), stop_reason="completed")
    assert relaxed["verdict"]["exit_code"] == 0


@pytest.mark.e2e
@pytest.mark.timeout(120)
def test_sigterm_mid_run_fails_and_report_agrees(tmp_path, start_sim):
    records = [content_record(i, i * 50.0, completion_tokens=20) for i in range(200)]  # 10 s of trace
    trace = write_content_trace(tmp_path / "t.parquet", records)
    url = start_sim("--profile", "fast")
    out = tmp_path / "run"
    cmd = replay_cmd(trace, url, out, "--engine", "vllm", "--grace", "5", "--max-dispatch-lag", "1s")
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not (out / ".parts").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(2.5)
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0, stdout + stderr
    info = run_info(out)
    sent, planned = info["summary"]["sent"], info["summary"]["planned"]
    assert info["stop_reason"] == "interrupted" and planned == 200 and sent < 200
    assert info["counts"]["not_sent"] == 200 - info["summary"]["requests"]
    assert (
        stdout.strip()
        .splitlines()[-1]
        .startswith(f"FAIL: replay not faithful: interrupted after {sent} of 200")
    )
    report = subprocess.run(
        [*cmd[:3], "report", str(out), "--json", "--max-dispatch-lag", "1s"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert report.returncode == 1
    assert json.loads(report.stdout)["verdict"]["headline"].startswith(
        f"FAIL: replay not faithful: interrupted after {sent} of 200 requests"
    )
