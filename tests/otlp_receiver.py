"""A real OTLP/HTTP receiver on loopback for the tests: what arrives at /v1/metrics and /v1/traces is
decoded with opentelemetry-proto's own messages (no hand-written parser) and kept, headers included.

`refuse` maps a path to the HTTP status it answers instead ({"/v1/metrics": 404}: a traces-only backend).
"""

from __future__ import annotations

import contextlib
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

MESSAGES = {
    "/v1/metrics": (ExportMetricsServiceRequest, ExportMetricsServiceResponse),
    "/v1/traces": (ExportTraceServiceRequest, ExportTraceServiceResponse),
}


class Received:
    def __init__(self, refuse: dict[str, int]):
        self.refuse = refuse
        self.metrics: list[ExportMetricsServiceRequest] = []
        self.traces: list[ExportTraceServiceRequest] = []
        self.headers: list[dict[str, str]] = []
        self.content_types: set[str] = set()
        self.url = ""


def _handler(received: Received):
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 (the http.server hook's name)
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            received.headers.append({name.lower(): value for name, value in self.headers.items()})
            received.content_types.add(self.headers.get("Content-Type", ""))
            status = received.refuse.get(self.path, 200 if self.path in MESSAGES else 404)
            if status != 200:
                self.send_response(status)
                self.end_headers()
                return
            request_type, response_type = MESSAGES[self.path]
            message = request_type.FromString(body)
            (received.metrics if self.path == "/v1/metrics" else received.traces).append(message)
            answer = response_type().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args):
            pass

    return Handler


@contextlib.contextmanager
def otlp_receiver(refuse: dict[str, int] | None = None):
    """A started receiver on 127.0.0.1 (a free port); yields its Received (.url the base URL)."""
    received = Received(refuse or {})
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(received))
    received.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield received
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
