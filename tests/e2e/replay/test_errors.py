"""Every error kind of the taxonomy, produced by the sim's fault injection (or a closed port)."""

from __future__ import annotations

import pytest
from live_processes import free_port
from replay_helpers import content_record, results, run_replays_concurrently, write_content_trace

pytestmark = pytest.mark.e2e  # every test here starts processes

# X-Sim-Fault value -> (error kind, HTTP status or None when not checked)
FAULTS = {
    "500": ("http_5xx", 500),
    "503": ("http_5xx", 503),
    "429": ("rate_limited_429", 429),
    "cut": ("connection_reset", 200),
    "truncate": ("stream_truncated", 200),
    "stream_error": ("stream_error", 200),
    "invalid": ("invalid_response", None),
    "hang": ("timeout", None),
}


@pytest.fixture(scope="module")
def one_stream(tmp_path_factory):
    path = tmp_path_factory.mktemp("trace") / "one.parquet"
    return write_content_trace(path, [content_record(0, 0.0, completion_tokens=12)])


def test_every_injected_fault_is_classified(one_stream, shared_sim, tmp_path):
    jobs = [
        (
            one_stream,
            shared_sim,
            tmp_path / fault,
            "--header",
            f"X-Sim-Fault: {fault}",
            "--read-timeout",
            "1.5",
            "--engine",
            "openai",
        )
        for fault in FAULTS
    ]
    for done in run_replays_concurrently(jobs):
        assert done.returncode in (0, 1), done.stderr
    for fault, (kind, status) in FAULTS.items():
        [row] = results(tmp_path / fault)
        assert (fault, row["error_kind"]) == (fault, kind)
        if status is not None:
            assert (fault, row["http_status"]) == (fault, status)
    assert results(tmp_path / "429")[0]["retry_after_ms"] == 1000
    hang = results(tmp_path / "hang")[0]
    assert 1.4e9 < hang["e2e_ns"] < 10e9


def test_closed_port_4xx_cancel_and_plain_json(one_stream, shared_sim, tmp_path):
    records = [
        content_record(0, 0.0, n=2),  # the sim answers n=1 only: 400
        content_record(1, 1.0, completion_tokens=5, error_kind="client_disconnected"),
        content_record(2, 2.0, stream=False, completion_tokens=4),
    ]
    trace = write_content_trace(tmp_path / "t.parquet", records)
    closed = f"http://127.0.0.1:{free_port()}"
    jobs = [
        (trace, shared_sim, tmp_path / "mixed", "--engine", "vllm"),
        (one_stream, closed, tmp_path / "closed", "--engine", "openai", "--model", "m"),
    ]
    for done in run_replays_concurrently(jobs):
        assert done.returncode in (0, 1), done.stderr
    [row] = results(tmp_path / "closed")
    assert row["error_kind"] == "connect_error" and row["http_status"] is None
    rows = {r["request_id"]: r for r in results(tmp_path / "mixed")}
    assert rows["r0"]["error_kind"] == "http_4xx" and rows["r0"]["http_status"] == 400
    assert rows["r1"]["error_kind"] == "cancelled" and len(rows["r1"]["chunk_offsets_ns"]) == 5
    assert rows["r1"]["requested_completion_tokens"] > 5
    assert rows["r2"]["error_kind"] is None and rows["r2"]["completion_tokens"] == 4
    assert rows["r2"]["chunk_offsets_ns"] is None and rows["r2"]["ttft_ns"] is None  # no first token
    assert rows["r2"]["e2e_ns"] > 0
