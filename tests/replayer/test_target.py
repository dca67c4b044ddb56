"""Engine detection from the engine table, against a tiny in-process HTTP server on port 0."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from replayer.target import probe_target


def serve(models_owner: str, server_header: str = "", extra: dict[str, dict] | None = None):
    """A server answering /v1/models (and the `extra` paths) with JSON; 404 anywhere else."""
    extra = extra or {}
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self):  # noqa: N802 (http.server's naming)
            seen.append(self.path)
            if self.path == "/v1/models":
                self._send(200, {"object": "list", "data": [{"id": "m", "owned_by": models_owner}]})
            elif self.path in extra:
                self._send(200, extra[self.path])
            else:
                self._send(404, {"error": "not found"})

        def version_string(self):
            return server_header or "plain"

        def _send(self, status, payload):
            body = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, args=(0.01,), daemon=True).start()
    return httpd, f"http://127.0.0.1:{httpd.server_address[1]}", seen


@pytest.mark.parametrize(
    ("owner", "header", "extra", "engine", "how"),
    [
        ("vllm", "", {}, "vllm", "owned_by"),
        ("llmreplay-sim", "", {}, "vllm", "owned_by"),
        ("sglang", "", {}, "sglang", "owned_by"),
        ("tensorrt_llm", "", {}, "trtllm", "owned_by"),
        ("llamacpp", "llama.cpp", {}, "llamacpp", "owned_by"),
        ("someone", "llama.cpp", {}, "llamacpp", "server header"),
        (
            "someone",
            "",
            {"/props": {"build_info": "b1-0c1e570", "total_slots": 16}},
            "llamacpp",
            "GET /props",
        ),
        (
            "someone",
            "",
            {"/get_server_info": {"tp_size": 1, "version": "0.5"}},
            "sglang",
            "GET /get_server_info",
        ),
        (
            "meta/llama",
            "",
            {"/info": {"router": "text-generation-router", "version": "3"}},
            "tgi",
            "GET /info",
        ),
        ("library", "", {"/api/version": {"version": "0.12.6"}}, "ollama", "GET /api/version"),
        ("openai", "", {}, "openai", "default"),
    ],
)
def test_the_engine_is_found_by_its_row(owner, header, extra, engine, how):
    httpd, url, _ = serve(owner, header, extra)
    try:
        found = probe_target(url, "detect", None)
    finally:
        httpd.shutdown()
    assert (found.engine, found.detected_from, found.models) == (engine, how, ("m",))


def test_a_flag_wins_and_nothing_beyond_the_model_list_is_asked():
    httpd, url, seen = serve("someone", extra={"/props": {"build_info": "b1"}})
    try:
        found = probe_target(url, "sglang", None)
    finally:
        httpd.shutdown()
    assert (found.engine, found.detected_from) == ("sglang", "flag") and seen == ["/v1/models"]


def test_a_probe_answer_without_the_key_names_no_engine():
    httpd, url, seen = serve("someone", extra={"/props": {"total_slots": 1}, "/info": {"router": "nginx"}})
    try:
        found = probe_target(url, "detect", None)
    finally:
        httpd.shutdown()
    assert found.engine == "openai" and "/props" in seen and "/info" in seen
