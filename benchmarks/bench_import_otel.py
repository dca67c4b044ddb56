"""`llmreplay import otel` throughput (spans/s on one core) and peak RSS, on OTLP JSON lines as a collector's
file exporter writes them: spans of the real SDK tracer with openai-v2-like gen_ai.* attributes (and a
non-GenAI span per request, as an HTTP instrumentation adds), encoded by the SDK's OTLP encoder in export
batches of 512 spans, ids in hex. The import runs in a child process pinned to one CPU.

    .venv/bin/python benchmarks/bench_import_otel.py --requests 50000
    .venv/bin/python benchmarks/bench_import_otel.py --requests 50000 --gzip
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]  # ROOT first: tests/llmreplay is a package too

T0_NS = 1_760_000_000_000_000_000


def build_spans(path: Path, requests: int, compress: bool, batch: int = 512) -> int:
    """`requests` chat spans (one in 8 streamed with a TTFT, sessions of 4 turns) and as many HTTP spans."""
    from google.protobuf import json_format
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import SpanKind
    from otlp_json_files import hex_ids

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("opentelemetry.instrumentation.openai_v2")
    opener = gzip.open if compress else open
    with opener(path, "wt", encoding="utf-8") as out:
        for i in range(requests):
            start = T0_NS + i * 20_000_000
            attributes = {
                "gen_ai.operation.name": "chat",
                "gen_ai.system": "openai",
                "gen_ai.request.model": "gpt-4o-mini",
                "gen_ai.request.max_tokens": 512,
                "gen_ai.response.model": "gpt-4o-mini-2024-07-18",
                "gen_ai.response.id": f"chatcmpl-{i:024d}",
                "gen_ai.response.finish_reasons": ("stop",),
                "gen_ai.usage.input_tokens": 200 + i % 3000,
                "gen_ai.usage.output_tokens": 20 + i % 400,
                "gen_ai.conversation.id": f"conv-{i // 4}",
                "server.address": "api.openai.com",
            }
            if i % 8 == 0:
                attributes |= {"gen_ai.request.stream": True, "gen_ai.response.time_to_first_chunk": 0.2}
            span = tracer.start_span(
                "chat gpt-4o-mini", kind=SpanKind.CLIENT, attributes=attributes, start_time=start
            )
            span.end(end_time=start + 900_000_000)
            tracer.start_span("POST", kind=SpanKind.CLIENT, start_time=start).end(
                end_time=start + 899_000_000
            )
            if len(exporter.get_finished_spans()) >= batch or i == requests - 1:
                data = json_format.MessageToDict(
                    encode_spans(exporter.get_finished_spans()), use_integers_for_enums=True
                )
                hex_ids(data)
                out.write(json.dumps(data, separators=(",", ":")) + "\n")
                exporter.clear()
    return 2 * requests


def run_import(source: Path, trace: Path) -> tuple[float, float, str]:
    """Wall seconds, the child's peak RSS in MB, and its summary line."""
    cmd = [sys.executable, "-m", "llmreplay.cli", "import", "otel", str(source), "-o", str(trace), "--force"]
    if hasattr(os, "sched_setaffinity"):
        cmd = ["taskset", "-c", "0", *cmd]
    started = time.perf_counter()
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=True)
    elapsed = time.perf_counter() - started
    peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return elapsed, peak_mb, done.stdout.splitlines()[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=50_000)
    parser.add_argument("--gzip", action="store_true", help="gzip the export file")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        source = Path(folder) / ("traces.json.gz" if args.gzip else "traces.json")
        spans = build_spans(source, args.requests, args.gzip)
        size_mb = source.stat().st_size / 1e6
        elapsed, peak_mb, summary = run_import(source, Path(folder) / "t.parquet")
    print(summary.replace(folder + "/", ""))
    print(
        f"{spans} spans ({size_mb:.1f} MB{' gzip' if args.gzip else ''}) in {elapsed:.2f} s, process start "
        f"included: {spans / elapsed:,.0f} spans/s, {args.requests / elapsed:,.0f} requests/s; peak RSS {peak_mb:.0f} MB"
    )


if __name__ == "__main__":
    main()
