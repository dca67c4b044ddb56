"""Does `replay --metrics-port` move dispatch lag? The same replay against `llmreplay sim`, without and
with it (scraped every --scrape-every seconds meanwhile, harder than any Prometheus would), interleaved
over --rounds rounds; prints each run's dispatch-lag p50/p99 (from results.parquet), the medians of each
arm and their ratio (with / without).

    .venv/bin/python benchmarks/bench_metrics_port.py [--rounds 5] [--rate 40] [--seconds 10]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import urllib.request
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
from _support import free_port, wait_http_ok

from llmreplay.processes import stop_process
from llmreplay.trace_format import TraceMeta, TraceRecord
from llmreplay.trace_io import write_trace

T0_US = 1_700_000_000_000_000


def write_trace_file(path: Path, rate: float, seconds: float) -> Path:
    """Streamed single-turn chat requests with content, evenly spaced at `rate` per second."""
    records = [
        TraceRecord(
            request_id=f"r{i}",
            arrival_time=T0_US + round(i * 1e6 / rate),
            endpoint="chat_completions",
            prompt_tokens=16,
            token_source="server_usage",
            model="sim-model",
            stream=True,
            completion_tokens=32,
            content_messages=json.dumps([{"role": "user", "content": f"question number {i} " * 4}]),
        )
        for i in range(int(rate * seconds))
    ]
    write_trace(path, records, TraceMeta(source="bench_metrics_port", content=True))
    return path


def scrape_until(url: str, every_s: float, stop: threading.Event, count: list[int]) -> None:
    while not stop.wait(every_s):
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if b"llmreplay_requests_sent_total{" in response.read():
                    count[0] += 1
        except OSError:
            pass  # before the server is up, after it is gone


def one_run(trace: Path, target: str, out: Path, metrics: bool, scrape_every_s: float) -> dict | None:
    cmd = [sys.executable, "-m", "llmreplay.cli", "replay", str(trace), "--target", target, "-o", str(out)]
    cmd += ["--quiet", "--skip-preflight"]
    stop, scrapes = threading.Event(), [0]
    scraper = None
    if metrics:
        port = free_port()
        cmd += ["--metrics-port", str(port)]
        url = f"http://127.0.0.1:{port}/metrics"
        scraper = threading.Thread(
            target=scrape_until, args=(url, scrape_every_s, stop, scrapes), daemon=True
        )
        scraper.start()
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    finally:
        stop.set()
        if scraper is not None:
            scraper.join(5)
    if not (out / "results.parquet").is_file():
        print(
            f"run {out.name}: no results (exit {done.returncode}): {done.stderr.strip()[-300:]}", flush=True
        )
        return None
    table = pq.read_table(out / "results.parquet", columns=["dispatch_lag_ns"])
    lag_ms = np.asarray(table.column("dispatch_lag_ns").drop_null().to_numpy(), dtype=float) / 1e6
    return {
        "p50_ms": float(np.percentile(lag_ms, 50)),
        "p99_ms": float(np.percentile(lag_ms, 99)),
        "sent": len(lag_ms),
        "scrapes": scrapes[0],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--rate", type=float, default=40.0, help="requests per second")
    parser.add_argument("--seconds", type=float, default=10.0, help="length of the trace")
    parser.add_argument("--scrape-every", type=float, default=0.25, help="seconds between scrapes (with)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-metrics-port-"))
    port = free_port()
    sim_cmd = [sys.executable, "-m", "llmreplay.cli", "sim", "--host", "127.0.0.1", "--port", str(port)]
    sim = subprocess.Popen(
        [*sim_cmd, "--profile", "fast"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        target = f"http://127.0.0.1:{port}"
        wait_http_ok(f"{target}/health", proc=sim)
        trace = write_trace_file(work / "trace.parquet", args.rate, args.seconds)
        runs: dict[bool, list[dict]] = {False: [], True: []}
        print(f"{'round':>5} {'metrics':>8} {'sent':>5} {'lag p50 ms':>11} {'lag p99 ms':>11} {'scrapes':>8}")
        for r in range(args.rounds):
            for metrics in (False, True) if r % 2 == 0 else (True, False):  # interleaved, order alternating
                figures = one_run(trace, target, work / f"run-{r}-{int(metrics)}", metrics, args.scrape_every)
                if figures is None:
                    continue
                runs[metrics].append(figures)
                print(
                    f"{r:>5} {'on' if metrics else 'off':>8} {figures['sent']:>5} {figures['p50_ms']:>11.3f} "
                    f"{figures['p99_ms']:>11.3f} {figures['scrapes']:>8}",
                    flush=True,
                )
        for key in ("p50_ms", "p99_ms"):
            off = statistics.median(run[key] for run in runs[False])
            on = statistics.median(run[key] for run in runs[True])
            print(
                f"median dispatch lag {key[:3]}: off {off:.3f} ms, on {on:.3f} ms, ratio on/off {on / off:.2f}"
            )
    finally:
        stop_process(sim)
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
