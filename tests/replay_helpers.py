"""Helpers for replayer tests: small content traces, the replay CLI as a subprocess, sim truth logs."""

from __future__ import annotations

import datetime
import json
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from llmreplay.run_format import RESULT_SCHEMA
from llmreplay.trace_format import TraceMeta, TraceRecord
from llmreplay.trace_io import write_trace

ROOT = Path(__file__).resolve().parents[1]
T0_US = 1_700_000_000_000_000


def content_record(i: int, at_ms: float, **kw) -> TraceRecord:
    """A streamed chat request with recorded content (no prompt synthesis needed)."""
    values = dict(
        request_id=f"r{i}",
        arrival_time=T0_US + round(at_ms * 1000),
        endpoint="chat_completions",
        prompt_tokens=8,
        token_source="server_usage",
        model="sim-model",
        stream=True,
        completion_tokens=8,
        content_messages=json.dumps([{"role": "user", "content": f"question number {i}"}]),
    )
    values.update(kw)
    return TraceRecord(**values)


def write_content_trace(path: Path, records) -> Path:
    write_trace(path, records, TraceMeta(source="test", content=True))
    return path


def replay_cmd(trace: Path, target: str, out: Path, *args: str, quiet: bool = True) -> list[str]:
    """`llmreplay replay` as a subprocess command line."""
    return [
        sys.executable,
        "-m",
        "llmreplay.cli",
        "replay",
        str(trace),
        "--target",
        target,
        "-o",
        str(out),
        *(["--quiet"] if quiet else []),
        *args,
    ]


def run_replay(
    trace: Path, target: str, out: Path, *args: str, timeout_s: float = 90
) -> subprocess.CompletedProcess:
    cmd = replay_cmd(trace, target, out, *args)
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout_s)


def results(out: Path) -> list[dict]:
    return pq.read_table(out / "results.parquet").to_pylist()


def run_info(out: Path) -> dict:
    return json.loads((out / "run.json").read_text())


def stop_and_wait(proc: subprocess.Popen, timeout_s: float = 15) -> None:
    """SIGTERM and wait, so the sim writes its ground-truth log."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=timeout_s)


def run_replays_concurrently(jobs, timeout_s: float = 120) -> list[subprocess.CompletedProcess]:
    """Several replay CLIs at once (trace, target, out, *args): most of a short run is process start-up."""
    procs = []
    for trace, target, out, *args in jobs:
        cmd = replay_cmd(trace, target, out, *args)
        procs.append(
            (cmd, subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        )
    done = []
    try:
        for cmd, proc in procs:
            stdout, stderr = proc.communicate(timeout=timeout_s)
            done.append(subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr))
    finally:
        for _, proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return done


RESULTS_T0 = datetime.datetime(2025, 1, 1, tzinfo=datetime.UTC)


def results_table(n: int, **values) -> pa.Table:
    """n sent, successful requests (1 ms lag); `values` overrides columns for every row."""
    rows = []
    for i in range(n):
        row = {name: None for name in RESULT_SCHEMA.names}
        row.update(
            request_id=f"r{i}",
            source_request_id=f"r{i}",
            turn_index=0,
            copy_index=0,
            worker=0,
            arrival_time=RESULTS_T0,
            endpoint="chat_completions",
            stream=True,
            tools_count=0,
            structured_output="none",
            scheduled_offset_ns=i * 1_000_000,
            sent_offset_ns=i * 1_000_000 + 1_000_000,
            dispatch_lag_ns=1_000_000,
            session_wait_ns=0,
            http_status=200,
            ttft_ns=5_000_000,
            e2e_ns=20_000_000,
            completion_tokens=4,
            recorded_completion_tokens=4,
        )
        row.update(values)
        rows.append(row)
    return pa.Table.from_pylist(rows, schema=RESULT_SCHEMA)
