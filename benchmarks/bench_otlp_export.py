"""What `export otlp` (and `replay --otlp-endpoint`, after the run) costs: seconds per 10,000 requests for
the metrics (read the run, aggregate, encode, send) and for the spans (one a request, batched), and spans/s.

A synthetic run of --requests streamed requests (--chunks chunks each) over --span-s seconds is sent to
an OTLP/HTTP sink in its own process on 127.0.0.1 that reads each body and answers 200 (it decodes nothing,
so the figures are the client's). Prints one markdown row per signal.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from _support import free_port, wait_http_ok  # noqa: E402

from llmreplay.run_format import RESULT_SCHEMA, RESULTS_FILE, RUN_FILE  # noqa: E402


def synthetic_run(out: Path, requests: int, chunks: int, span_s: float, seed: int = 1) -> Path:
    """results.parquet (RESULT_SCHEMA) and a minimal run.json: streamed chat requests, 2% failed with 5xx."""
    rng = np.random.default_rng(seed)
    start_us = int(time.time() * 1e6) - int(span_s * 1e6) - 60_000_000
    sent_us = start_us + np.sort(rng.integers(0, int(span_s * 1e6), requests))
    ttft = rng.lognormal(np.log(0.2e9), 0.5, requests).astype(np.int64)
    gaps = rng.lognormal(np.log(0.02e9), 0.3, (requests, chunks)).astype(np.int64)
    offsets = ttft[:, None] + np.cumsum(gaps, axis=1) - gaps[:, :1]
    failed = rng.random(requests) < 0.02
    ids = pa.array([f"r{i}" for i in range(requests)])
    given = {
        "request_id": ids,
        "source_request_id": ids,
        "turn_index": pa.array(np.zeros(requests, np.int32)),
        "arrival_time": pa.array(sent_us),
        "endpoint": pa.array(["chat_completions"] * requests),
        "model": pa.array(["bench-model"] * requests),
        "stream": pa.array(np.ones(requests, bool)),
        "tools_count": pa.array(np.zeros(requests, np.int32)),
        "structured_output": pa.array(["none"] * requests),
        "copy_index": pa.array(np.zeros(requests, np.int16)),
        "worker": pa.array(np.zeros(requests, np.int16)),
        "scheduled_offset_ns": pa.array((sent_us - start_us) * 1000),
        "sent_offset_ns": pa.array((sent_us - start_us) * 1000),
        "dispatch_lag_ns": pa.array(np.full(requests, 50_000)),
        "session_wait_ns": pa.array(np.zeros(requests, np.int64)),
        "sent_time": pa.array(sent_us),
        "http_status": pa.array(np.where(failed, 500, 200)),
        "error_kind": pa.array(["http_5xx" if f else None for f in failed]),
        "prompt_tokens": pa.array(rng.integers(100, 4000, requests)),
        "completion_tokens": pa.array(np.where(failed, 0, chunks)),
        "ttft_ns": pa.array(ttft),
        "e2e_ns": pa.array(offsets[:, -1] + 1_000_000),
        "chunk_offsets_ns": pa.ListArray.from_arrays(
            np.arange(0, requests * chunks + 1, chunks), offsets.ravel()
        ),
        "finish_reason": pa.array([None if f else "length" for f in failed]),
        "warmup": pa.array(np.zeros(requests, bool)),
        "loop": pa.array(np.zeros(requests, np.int32)),
    }
    columns = [
        given[f.name].cast(f.type) if f.name in given else pa.nulls(requests, f.type) for f in RESULT_SCHEMA
    ]
    out.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_arrays(columns, schema=RESULT_SCHEMA), out / RESULTS_FILE)
    target = {"base_url": "http://staging:8000", "engine": "vllm", "engine_from": "flag", "models": []}
    run_json = {"run_format_version": "1.4", "target": target, "started_unix_ns": start_us * 1000}
    (out / RUN_FILE).write_text(json.dumps(run_json))
    return out


class _Sink(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):  # noqa: N802 (the http.server hook's name)
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_GET(self):  # noqa: N802
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def measure(run: Path, endpoint: str) -> dict[str, float]:
    """Seconds for: reading the run; metrics (aggregate, encode, send); spans (build, encode, send)."""
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    from llmreplay.otlp.metric_points import metrics_data, windows_of
    from llmreplay.otlp.run_requests import read_run_requests
    from llmreplay.otlp.send import _resource_and_scope
    from llmreplay.otlp.spans import send_spans

    t0 = time.perf_counter()
    requests = read_run_requests(run)
    resource, scope = _resource_and_scope(requests.resource)
    t1 = time.perf_counter()
    data, points = metrics_data(requests, windows_of(requests, None), scope, resource)
    exporter = OTLPMetricExporter(endpoint=f"{endpoint}/v1/metrics", timeout=60)
    assert exporter.export(data).name == "SUCCESS"
    exporter.shutdown()
    t2 = time.perf_counter()
    sent = send_spans(
        requests, OTLPSpanExporter(endpoint=f"{endpoint}/v1/traces", timeout=60), resource, scope
    )
    t3 = time.perf_counter()
    assert not sent.failed and sent.sent == requests.table.num_rows
    return {"read_s": t1 - t0, "metrics_s": t2 - t1, "points": points, "spans_s": t3 - t2, "spans": sent.sent}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=100_000)
    parser.add_argument("--chunks", type=int, default=64, help="token-carrying chunks per request")
    parser.add_argument("--span-s", type=float, default=3600.0, help="the run's length in seconds")
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)  # the sink process
    args = parser.parse_args()
    if args.serve:
        ThreadingHTTPServer(("127.0.0.1", args.serve), _Sink).serve_forever()
        return
    port = free_port()
    sink = subprocess.Popen([sys.executable, __file__, "--serve", str(port)])
    try:
        wait_http_ok(f"http://127.0.0.1:{port}/", proc=sink)
        with tempfile.TemporaryDirectory() as work:
            run = synthetic_run(Path(work) / "run", args.requests, args.chunks, args.span_s)
            found = measure(run, f"http://127.0.0.1:{port}")
    finally:
        sink.terminate()
        sink.wait(timeout=10)
    per_10k = 10_000 / args.requests
    print(
        f"{args.requests} requests x {args.chunks} chunks over {args.span_s:g} s; read the run {found['read_s']:.2f} s"
    )
    print("| signal | sent | seconds | s per 10k requests | rate |")
    print("|---|---|---|---|---|")
    metrics_s, spans_s = found["metrics_s"], found["spans_s"]
    print(f"| metrics | {found['points']} points | {metrics_s:.2f} | {metrics_s * per_10k:.3f} | "
          f"{args.requests / metrics_s:,.0f} requests/s |")  # fmt: skip
    print(f"| spans | {found['spans']} spans | {spans_s:.2f} | {spans_s * per_10k:.3f} | "
          f"{found['spans'] / spans_s:,.0f} spans/s |")  # fmt: skip


if __name__ == "__main__":
    main()
