"""Bad answers and impossible plans are refused before the clock starts: one line, exit 2, no run.

The target probe (GET /v1/models) against malformed servers, an unresolvable host, a dead or wrong
--server-metrics URL; and --duration, which builds only the requests it can send.
"""

from __future__ import annotations

import socket
import threading

import pytest
from bad_input import assert_refused
from replay_helpers import content_record, replay_cmd, results, run_info, write_content_trace

from replayer.config import ScheduleConfig
from replayer.plan.bounds import within_duration
from replayer.plan.schedule import build_schedule, schedule_input
from replayer.plan.trace_rows import read_trace_rows

MODELS = b'{"object": "list", "data": [{"id": "sim-model", "owned_by": "vllm"}]}'
ANSWERS = {
    "bad status line": b"HTTP/1.1 abc OK\r\n\r\n",
    "not HTTP": b"SSH-2.0-OpenSSH_9.6\r\n",
    "64 KB header": b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * 70_000 + b"\r\n\r\n",
    "short body": b'HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{"data"',
    "200 headers": b"HTTP/1.1 200 OK\r\n" + b"X-A: a\r\n" * 200 + b"\r\n",
    "not JSON": b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
    "good": b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
    % (len(MODELS), MODELS),
}
EXPECTED = {
    "bad status line": "BadStatusLine",
    "not HTTP": "BadStatusLine",
    "64 KB header": "LineTooLong",
    "short body": "IncompleteRead",
    "200 headers": "more than 100 headers",
    "not JSON": "not JSON",
}


class CannedServer:
    """Answers every connection with the same bytes, then closes (a thread of the test)."""

    def __init__(self, answer: bytes):
        self.answer = answer
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self) -> CannedServer:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.sock.close()
        self._thread.join(5)

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                try:
                    conn.recv(65536)
                    conn.sendall(self.answer)
                except OSError:
                    pass


@pytest.fixture
def one_request(tmp_path):
    return write_content_trace(tmp_path / "t.parquet", [content_record(0, 0.0)])


def refused_replay(trace, target, out, *args, expected=()):
    import subprocess

    done = subprocess.run(replay_cmd(trace, target, out, *args), capture_output=True, text=True, timeout=90)
    line = assert_refused(done, *expected)
    assert not out.exists(), "nothing is written for a refused replay"
    return line


@pytest.mark.e2e
@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_malformed_model_list_answers_are_one_line(one_request, tmp_path, case):
    with CannedServer(ANSWERS[case]) as server:
        refused_replay(one_request, server.url, tmp_path / "run",
                       expected=("GET /v1/models failed", EXPECTED[case], "pass --engine"))  # fmt: skip


@pytest.mark.e2e
def test_unresolvable_host_is_one_line_even_with_engine_given(one_request, tmp_path):
    line = refused_replay(one_request, "http://no-such-host.invalid:8000", tmp_path / "run",
                          "--engine", "vllm", "--model", "m")  # fmt: skip
    assert "cannot resolve host no-such-host.invalid" in line


@pytest.mark.e2e
def test_dead_or_wrong_server_metrics_fail_before_the_clock(one_request, tmp_path):
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{closed.getsockname()[1]}/metrics"  # bound, not listening: refused
        with CannedServer(ANSWERS["good"]) as server:
            line = refused_replay(one_request, server.url, tmp_path / "dead", "--server-metrics", dead)
            assert line.endswith(f"--server-metrics {dead}: Connection refused")
            line = refused_replay(one_request, server.url, tmp_path / "wrong", "--server-metrics",
                                  server.url + "/v1/models")  # fmt: skip
            assert "holds no Prometheus samples" in line


def test_duration_drops_the_plans_it_cannot_send_before_building(tmp_path):
    trace = write_content_trace(tmp_path / "t.parquet", [content_record(i, i * 1000.0) for i in range(12)])
    rows = read_trace_rows(trace)
    plans = build_schedule(schedule_input(rows.table), ScheduleConfig())
    kept, dropped = within_duration(plans, 2_500_000_000)
    assert (len(kept), dropped) == (3, 9) and kept.scheduled_offset_ns.max() < 2_500_000_000
    assert within_duration(plans, None) == (plans, 0)


@pytest.mark.e2e
def test_duration_run_sends_what_it_built_and_says_duration(tmp_path, shared_sim):
    import subprocess

    trace = write_content_trace(tmp_path / "t.parquet", [content_record(i, i * 400.0) for i in range(40)])
    out = tmp_path / "run"
    done = subprocess.run(replay_cmd(trace, shared_sim, out, "--duration", "1s", "--engine", "openai"),
                          capture_output=True, text=True, timeout=90)  # fmt: skip
    assert done.returncode in (0, 1), done.stderr
    assert sorted(r["request_id"] for r in results(out)) == ["r0", "r1", "r2"]
    info = run_info(out)
    assert info["stop_reason"] == "duration" and info["counts"]["not_sent"] == 0
