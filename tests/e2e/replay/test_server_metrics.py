"""Server metrics end to end against `llmreplay sim` (vLLM-like, in this process): the target's own
/metrics scraped by default through the engine row's names, kept in run.json, shown by `report` (terminal
lines, an HTML chart) and `compare`; `--server-metrics none` scrapes nothing; a bad URL is one line."""

from __future__ import annotations

import http.server
import subprocess
import threading

import pytest
from bad_input import refused
from live_processes import ROOT, llmreplay_cmd
from replay_helpers import content_record, replay_cmd, run_info, run_replay, write_content_trace

from replayer.config import SERVER_METRICS_OFF

pytestmark = pytest.mark.e2e  # every test here starts a replay process
MODELS = b'{"object": "list", "data": [{"id": "sim-model", "owned_by": "vllm"}]}'
SUMMARY_KEYS = {
    "peak_running",
    "peak_waiting",
    "peak_kv_cache_usage",
    "prefix_cache_hit_share",
    "preemptions",
}


@pytest.fixture(scope="module")
def sim_url():
    from in_process_sim import sims_in_process

    with sims_in_process() as start:
        yield start("fast").url


@pytest.fixture
def trace(tmp_path):
    # 3 s at ~4 requests in flight: scraped once a second, the batch is seen busy
    records = [content_record(i, i * 50.0, completion_tokens=48) for i in range(60)]
    return write_content_trace(tmp_path / "t.parquet", records)


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(llmreplay_cmd(*args), capture_output=True, text=True, timeout=120, cwd=ROOT)


def test_the_targets_own_metrics_are_scraped_by_default_kept_and_shown(sim_url, trace, tmp_path):
    out = tmp_path / "run"
    done = run_replay(trace, sim_url, out, "--skip-preflight")
    assert done.returncode in (0, 1), done.stderr[-2000:]
    scraped = run_info(out)["server_metrics"]
    assert (scraped["url"], scraped["from"]) == (f"{sim_url}/metrics", "default")
    assert scraped["scrapes"] >= 1 and set(scraped["summary"]) == SUMMARY_KEYS
    assert scraped["summary"]["peak_running"] >= 1  # the sim's batch, read through vLLM's names
    assert (out / "server_metrics.parquet").is_file()

    report = cli("report", str(out), "--html", str(tmp_path / "report.html"))
    assert report.returncode in (0, 1), report.stderr[-2000:]
    assert "Server metrics of run (vllm's /metrics):" in report.stdout
    assert "Queue: waiting requests: " in report.stdout and "Running requests: peak " in report.stdout
    html = (tmp_path / "report.html").read_text()
    assert "<h2>Server metrics over time</h2>" in html
    for title in ("Queue: waiting requests", "Running requests", "KV-cache usage", "Prefix-cache hit rate"):
        assert f"aria-label='{title}'" in html  # an SVG time chart each
    assert "aria-label='Client TTFT over time (p50 solid, p99 dashed)'" in html  # beside the client's

    compared = cli("compare", str(trace), str(out), "--html", str(tmp_path / "compare.html"))
    assert compared.returncode in (0, 1), compared.stderr[-2000:]
    assert "Server metrics of candidate (vllm's /metrics):" in compared.stdout
    assert "aria-label='Queue: waiting requests'" in (tmp_path / "compare.html").read_text()


def test_none_scrapes_nothing(sim_url, trace, tmp_path):
    out = tmp_path / "run"
    done = run_replay(
        trace, sim_url, out, "--limit", "3", "--skip-preflight", "--server-metrics", SERVER_METRICS_OFF
    )
    assert done.returncode in (0, 1), done.stderr[-2000:]
    assert run_info(out)["server_metrics"] is None and not (out / "server_metrics.parquet").exists()


class NoMetrics(http.server.BaseHTTPRequestHandler):
    """A vLLM by its model list, with no /metrics: every other path is 404."""

    def do_GET(self):  # noqa: N802 (http.server's name)
        body = MODELS if self.path == "/v1/models" else b"{}"
        self.send_response(200 if self.path == "/v1/models" else 404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_POST = do_GET

    def log_message(self, *args):
        pass


def test_a_default_endpoint_that_does_not_answer_is_a_warning_not_a_failed_run(trace, tmp_path):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), NoMetrics)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url, out = f"http://127.0.0.1:{server.server_port}", tmp_path / "run"
    try:
        cmd = replay_cmd(trace, url, out, "--limit", "2", "--skip-preflight", quiet=False)
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=ROOT)
    finally:
        server.shutdown()
        server.server_close()
    assert done.returncode in (0, 1), done.stderr[-2000:]  # its requests fail: 404
    assert f"warning: server metrics {url}/metrics: HTTP 404 Not Found; not scraped" in done.stderr
    assert run_info(out)["server_metrics"] is None


def test_a_malformed_explicit_url_is_one_line(trace, tmp_path):
    line = refused("replay", str(trace), "--target", "http://127.0.0.1:9", "-o", str(tmp_path / "run"),
                   "--server-metrics", "http://127.0.0.1:notaport/metrics")  # fmt: skip
    assert line.endswith(
        "--server-metrics 'http://127.0.0.1:notaport/metrics': the port is not a number from 1 to 65535"
    )
