"""Ctrl-C mid-run: a valid results.parquet with every request that reached the server; no secret
written anywhere; bad input is one line and exit status 2."""

from __future__ import annotations

import signal
import subprocess
import time

import pyarrow.parquet as pq
import pytest
from replay_helpers import ROOT, content_record, replay_cmd, run_info, run_replay, write_content_trace

from llmreplay.run_format import RESULT_SCHEMA

pytestmark = pytest.mark.e2e  # every test here starts processes

API_KEY = "sk-test-SECRET-4f9a"
HEADER_SECRET = "hush-HEADER-77"


def test_sigint_keeps_every_sent_request_and_leaks_no_secret(tmp_path, sim_with_truth):
    records = [content_record(i, i * 40.0, completion_tokens=60) for i in range(250)]  # 10 s of trace
    trace = write_content_trace(tmp_path / "t.parquet", records)
    url, truth = sim_with_truth("--profile", "fast")
    out = tmp_path / "run"
    cmd = replay_cmd(
        trace,
        url,
        out,
        "--engine",
        "vllm",
        "--header",
        f"X-Custom-Auth: {HEADER_SECRET}",
        "--grace",
        "5",
        quiet=False,
    )
    proc = subprocess.Popen(
        cmd,
        cwd=ROOT,
        env={"LLMREPLAY_API_KEY": API_KEY, "PATH": "/usr/bin:/bin"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60
        while not (out / ".parts").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(3.0)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr.decode()[-2000:]  # Ctrl-C: 130, the run kept
    table = pq.read_table(out / "results.parquet")
    assert table.schema.remove_metadata() == RESULT_SCHEMA
    rows = table.to_pylist()
    assert 20 < len(rows) < 250
    at_server = truth()
    assert {r["request_id"] for r in rows} == set(at_server)
    assert all(r["sent_offset_ns"] is not None for r in rows)
    assert run_info(out)["stop_reason"] == "interrupted"
    for path in out.rglob("*"):
        data = path.read_bytes()
        assert API_KEY.encode() not in data and HEADER_SECRET.encode() not in data, path
    for text in (stdout, stderr):
        assert API_KEY.encode() not in text and HEADER_SECRET.encode() not in text


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    missing = run_replay(tmp_path / "nope.parquet", "http://127.0.0.1:9", tmp_path / "run")
    assert missing.returncode == 2 and missing.stderr.strip().count("\n") == 0
    assert "nope.parquet" in missing.stderr
    trace = write_content_trace(tmp_path / "t.parquet", [content_record(0, 0.0)])
    bad_speed = run_replay(
        trace, "http://127.0.0.1:9", tmp_path / "run", "--speed", "0", "--engine", "openai"
    )
    assert bad_speed.returncode == 2 and "--speed" in bad_speed.stderr
    bad_target = run_replay(trace, "ftp://x", tmp_path / "run")
    assert bad_target.returncode == 2 and "--target" in bad_target.stderr
