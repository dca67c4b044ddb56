"""Replay fidelity and client cost against `llmreplay sim` on 127.0.0.1, measured at the server.

For each Mooncake-style shape: generate a shape trace, start a sim with a ground-truth log and
room for the whole load, replay, and compare the replayer's timestamps with the sim's:
dispatch lag (server arrival - scheduled), TTFT error (when the client saw the first token - when
the sim wrote it), ITL error (client vs sim mean inter-token gap), client CPU-s per 1,000 requests
(workers' event loops) and peak RSS. `--quick` runs short versions of every shape.

    .venv/bin/python benchmarks/bench_replay.py [--quick] [--shapes light,long,short] [--workers N]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from llmreplay.trace_format import TraceMeta, TraceRecord  # noqa: E402
from llmreplay.trace_io import write_trace  # noqa: E402

T0_US = 1_700_000_000_000_000
BLOCK_SIZE = 512


@dataclass(frozen=True)
class Shape:
    name: str
    rate_per_s: float
    duration_s: float
    input_median_tokens: int
    output_median_tokens: int
    description: str


SHAPES = {
    "light": Shape("light", 10, 60, 500, 150, "10 req/s Poisson, ~500-token inputs, ~150-token streams"),
    "long": Shape("long", 50, 60, 500, 190, "50 req/s Poisson, ~500-token inputs, ~190-token streams"),
    "short": Shape("short", 204, 30, 64, 8, "204 req/s Poisson, short prompts, ~8-token streams"),
}


def make_trace(shape: Shape, duration_s: float, path: Path, seed: int = 0) -> int:
    """Poisson arrivals, lognormal lengths, unique block hashes (no prefix sharing)."""
    rng = random.Random(seed)
    records, at_s, i = [], 0.0, 0
    while at_s < duration_s:
        prompt = max(1, round(rng.lognormvariate(np.log(shape.input_median_tokens), 0.6)))
        output = max(1, round(rng.lognormvariate(np.log(shape.output_median_tokens), 0.3)))
        blocks = -(-prompt // BLOCK_SIZE)
        records.append(
            TraceRecord(
                request_id=f"{shape.name}-{i}",
                arrival_time_us=T0_US + round(at_s * 1e6),
                endpoint="chat_completions",
                prompt_tokens=prompt,
                completion_tokens=output,
                token_source="imported",
                model="sim-model",
                stream=True,
                prefix_block_hashes=tuple(rng.getrandbits(62) for _ in range(blocks)),
            )
        )
        i += 1
        at_s += rng.expovariate(shape.rate_per_s)
    write_trace(
        path, records, TraceMeta(source=f"bench:{shape.name}", block_size=BLOCK_SIZE, relative_time=True)
    )
    return len(records)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_sim(log: Path, out: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    cmd = [
        sys.executable, "-m", "llmreplay.cli", "sim", "--host", "127.0.0.1", "--port", str(port),
        "--profile", "fast", "--log", str(log), "--max-num-seqs", "4096", "--max-waiting", "100000",
        "--kv-cache-tokens", "100000000",
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=open(out, "wb"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            with urllib.request.urlopen(url + "/health", timeout=1):
                return proc, url
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError(f"sim exited: {out.read_text()[-2000:]}") from None
            time.sleep(0.1)
    raise RuntimeError("sim did not start")


def stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)


def run_shape(shape: Shape, duration_s: float, workers: int, work: Path) -> dict:
    trace = work / f"{shape.name}.parquet"
    count = make_trace(shape, duration_s, trace)
    truth_path = work / f"{shape.name}-truth.parquet"
    sim, url = start_sim(truth_path, work / f"{shape.name}-sim.log")
    run_dir = work / f"{shape.name}-run"
    try:
        cmd = [
            sys.executable, "-m", "llmreplay.cli", "replay", str(trace), "--target", url, "-o", str(run_dir),
            "--engine", "vllm", "--json", "--workers", str(workers), "--grace", "30",
        ]  # fmt: skip
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=duration_s * 4 + 300)
        if done.returncode not in (0, 1):
            raise RuntimeError(f"replay failed: {done.stderr[-3000:]}")
    finally:
        stop(sim)
    return measure(shape, count, run_dir, truth_path)


def measure(shape: Shape, count: int, run_dir: Path, truth_path: Path) -> dict:
    run = json.loads((run_dir / "run.json").read_text())
    start = run["start_mono_ns"]
    truth = {r["request_id"]: r for r in pq.read_table(truth_path).to_pylist()}
    rows = [
        r for r in pq.read_table(run_dir / "results.parquet").to_pylist() if r["sent_offset_ns"] is not None
    ]
    due = np.array([start + r["scheduled_offset_ns"] + r["session_wait_ns"] for r in rows], dtype=np.int64)
    arrival = np.array([truth[r["request_id"]]["arrival_mono_ns"] for r in rows], dtype=np.int64)
    server_lag_ms = (arrival - due) / 1e6
    client_lag_ms = np.array([r["dispatch_lag_ns"] for r in rows]) / 1e6
    ok = [r for r in rows if r["error_kind"] is None and r["ttft_ns"] is not None]
    sent_abs = {r["request_id"]: start + r["sent_offset_ns"] for r in ok}
    ttft_err_ms = np.array(
        [
            (sent_abs[r["request_id"]] + r["ttft_ns"] - truth[r["request_id"]]["first_token_mono_ns"]) / 1e6
            for r in ok
        ]
    )
    itl_err_ms = []
    for r in ok:
        t, offsets = truth[r["request_id"]], r["chunk_offsets_ns"] or []
        if len(offsets) > 1 and t["completion_tokens"] and t["completion_tokens"] > 1:
            client_gap = (offsets[-1] - offsets[0]) / (len(offsets) - 1)
            server_gap = (t["last_token_mono_ns"] - t["first_token_mono_ns"]) / (t["completion_tokens"] - 1)
            itl_err_ms.append((client_gap - server_gap) / 1e6)
    itl_err_ms = np.array(itl_err_ms)
    sent_offsets = np.array([r["sent_offset_ns"] for r in rows]) / 1e9
    span_s = sent_offsets.max() - sent_offsets.min() if len(rows) > 1 else 0.0
    loop_cpu_s = sum(w.get("loop_cpu_s", 0.0) for w in run["workers"])
    p = np.percentile
    return {
        "shape": shape.name,
        "requests": count,
        "sent": len(rows),
        "errors": len(rows) - len(ok),
        "target_rate": shape.rate_per_s,
        "achieved_rate": (len(rows) - 1) / span_s if span_s else 0.0,
        "lag_ms": (p(server_lag_ms, 50), p(server_lag_ms, 99), server_lag_ms.max()),
        "own_lag_ms": (p(client_lag_ms, 50), p(client_lag_ms, 99), client_lag_ms.max()),
        "ttft_err_ms": (p(ttft_err_ms, 50), p(ttft_err_ms, 99)) if len(ttft_err_ms) else (np.nan, np.nan),
        "itl_err_ms": (p(np.abs(itl_err_ms), 50), p(np.abs(itl_err_ms), 99))
        if len(itl_err_ms)
        else (np.nan, np.nan),
        "cpu_s_per_1000": loop_cpu_s / max(1, len(rows)) * 1000,
        "peak_rss_mb": max((w.get("max_rss_mb", 0.0) for w in run["workers"]), default=0.0),
        "agrees_1ms_p99": abs(p(server_lag_ms, 99) - p(client_lag_ms, 99)) <= 1.0,
    }


def print_table(results: list[dict]) -> None:
    header = (
        "| shape | sent | errors | rate target/achieved | lag p50/p99/max ms (server) | own lag p50/p99/max ms "
        "| TTFT err p50/p99 ms | ITL err p50/p99 ms | CPU-s / 1000 req | peak RSS MB | own p99 within 1 ms |"
    )
    print(header)
    print("|---|---:|---:|---|---|---|---|---|---:|---:|---|")
    for r in results:
        print(
            f"| {r['shape']} | {r['sent']} | {r['errors']} | {r['target_rate']:.0f} / {r['achieved_rate']:.1f} "
            f"| {r['lag_ms'][0]:.2f} / {r['lag_ms'][1]:.2f} / {r['lag_ms'][2]:.2f} "
            f"| {r['own_lag_ms'][0]:.2f} / {r['own_lag_ms'][1]:.2f} / {r['own_lag_ms'][2]:.2f} "
            f"| {r['ttft_err_ms'][0]:.2f} / {r['ttft_err_ms'][1]:.2f} | {r['itl_err_ms'][0]:.3f} / {r['itl_err_ms'][1]:.3f} "
            f"| {r['cpu_s_per_1000']:.2f} | {r['peak_rss_mb']:.0f} | {'yes' if r['agrees_1ms_p99'] else 'NO'} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10 s per shape instead of the full durations")
    parser.add_argument("--shapes", default="light,long,short")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--duration-s", type=float, help="override every shape's duration")
    parser.add_argument(
        "--keep", action="store_true", help="keep the work directory (traces, runs, truth logs)"
    )
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench_replay-"))
    print(
        f"# bench_replay: {os.cpu_count()} cpus, load average {os.getloadavg()[0]:.2f}, workers {args.workers}, work dir {work}"
    )
    results = []
    for name in args.shapes.split(","):
        shape = SHAPES[name]
        duration = args.duration_s or (10.0 if args.quick else shape.duration_s)
        print(f"# {shape.name}: {shape.description}, {duration:.0f} s", flush=True)
        results.append(run_shape(shape, duration, args.workers, work))
    print_table(results)
    if not args.keep:
        import shutil

        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
