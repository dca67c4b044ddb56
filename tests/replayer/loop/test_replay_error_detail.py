"""A failed request keeps its status and the first 2 KB of what the engine said — secrets scrubbed
before anything reaches a file — and the replay's verdict says how many failed and why."""

from __future__ import annotations

import json
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from replay_helpers import ROOT, content_record, replay_cmd, results, write_content_trace

from llmreplay.redaction import REDACTED, scrub_secrets, secret_values
from replayer.loop.client import ERROR_EXCERPT_BYTES, Outcome
from replayer.loop.result_spool import fields, outcome_of

API_KEY = "sk-live-ECHOED-7f3a9c2b1d"
HEADER_SECRET = "tenant-TOKEN-5521"


def test_known_secrets_and_credential_shapes_are_scrubbed():
    known = secret_values([("Authorization", f"Bearer {API_KEY}"), ("X-Tenant", HEADER_SECRET)], None)
    assert known == (f"Bearer {API_KEY}", API_KEY, HEADER_SECRET)
    body = (
        f'{{"error": "invalid key {API_KEY} for tenant {HEADER_SECRET}", "echo": "Authorization: Bearer '
        f'{API_KEY}", "other": "sk-proj-abcdef123456", "x-api-key": "zz-99-QQ", "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.c2lnbmF0dXJlMTIz"}}'
    )
    scrubbed = scrub_secrets(body, known)
    for secret in (API_KEY, HEADER_SECRET, "sk-proj-abcdef123456", "zz-99-QQ", "eyJhbGciOiJIUzI1NiJ9"):
        assert secret not in scrubbed
    assert scrubbed.count(REDACTED) >= 5 and '"x-api-key": "[redacted]"' in scrubbed
    assert scrub_secrets("model overloaded, retry in 3 s", known) == "model overloaded, retry in 3 s"


def test_public_and_short_header_values_are_not_secrets():
    headers = [("User-Agent", "llmreplay/0.1.0"), ("Content-Type", "application/json"), ("X-Flag", "on")]
    assert secret_values(headers, None) == ()


def test_the_spool_scrubs_the_detail_before_it_is_written():
    outcome = Outcome(0)
    outcome.fail("http_4xx", f'{{"error": "key {API_KEY} revoked"}}')
    values = fields(3, 100, outcome, (API_KEY,))
    restored = outcome_of(values)
    assert (
        restored.error_detail == '{"error": "key [redacted] revoked"}' and restored.error_kind == "http_4xx"
    )


class EchoingEngine(BaseHTTPRequestHandler):
    """401 on every chat request, its body echoing the request's credentials, then 3 KB of padding."""

    protocol_version = "HTTP/1.1"

    def do_GET(self):  # noqa: N802 (http.server's naming)
        self._send(200, json.dumps({"data": [{"id": "sim-model", "owned_by": "someone"}]}).encode())

    def do_POST(self):  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        message = f"invalid credentials: {self.headers.get('Authorization')} / tenant {self.headers.get('X-Tenant')}"
        body = json.dumps({"error": {"message": message, "type": "invalid_request_error"}, "pad": "x" * 3000})
        self._send(401, body.encode())

    def _send(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def echoing_engine():
    server = ThreadingHTTPServer(("127.0.0.1", 0), EchoingEngine)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.e2e
def test_a_body_echoing_the_api_key_is_stored_scrubbed_and_the_replay_fails(tmp_path, echoing_engine):
    trace = write_content_trace(tmp_path / "t.parquet", [content_record(i, i * 20.0) for i in range(3)])
    out = tmp_path / "run"
    secret_header = f"X-Tenant: {HEADER_SECRET}"
    # a generous lag limit: the box is shared with other tests, and fidelity is not what this is about
    cmd = replay_cmd(
        trace,
        echoing_engine,
        out,
        "--engine",
        "openai",
        "--header",
        secret_header,
        "--max-dispatch-lag",
        "1s",
    )
    env = {"LLMREPLAY_API_KEY": API_KEY, "PATH": "/usr/bin:/bin"}
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=90)
    # --quiet still prints the verdict, one line: every request failed
    assert done.returncode == 1, done.stderr[-2000:]
    assert done.stdout.strip().splitlines() == [
        "FAIL: error rate 100.0% > 1% (http_4xx 3); run: no successful request (3 sent or planned); replay faithful"
    ]
    rows = results(out)
    assert [r["http_status"] for r in rows] == [401] * 3
    for row in rows:
        detail = row["error_detail"]
        assert detail.startswith(
            '{"error": {"message": "invalid credentials: [redacted] / tenant [redacted]"'
        )
        assert len(detail.encode()) <= ERROR_EXCERPT_BYTES  # the first 2 KB of a 3 KB body
    for path in out.rglob("*"):
        data = path.read_bytes()
        assert API_KEY.encode() not in data and HEADER_SECRET.encode() not in data, path
    report = subprocess.run(
        [*replay_cmd(trace, "", out)[:3], "report", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert report.returncode == 1
    assert "3 x http_4xx 401: invalid credentials: [redacted] / tenant [redacted]" in report.stdout
    assert API_KEY not in report.stdout + report.stderr
