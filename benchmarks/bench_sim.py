"""Benchmark `llmreplay sim`: streamed requests/s, SSE chunks/s and step lateness on one core.

The sim is pinned to CPU 0 and a bounded aiohttp load generator (a separate process) to CPU 1,
both on 127.0.0.1. Each load level sends a fixed number of streamed requests at a fixed
concurrency; figures come from the client (completions, chunks) and the sim's own step log.
Run: .venv/bin/python benchmarks/bench_sim.py [--seconds S] [--no-pin]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _support import free_port, wait_http_ok

ROOT = Path(__file__).resolve().parent.parent

SIM_CPU, CLIENT_CPU = 0, 1
# An engine fast enough that the sim's own CPU, not its model, is the limit being measured.
BENCH_ENGINE = [
    "--max-num-seqs", "1024", "--kv-cache-tokens", "100000000", "--prefill-ns-per-token", "0",
    "--decode-per-seq-ms", "0", "--max-waiting", "100000",
]  # fmt: skip


def start_sim(port: int, log: Path, step_ms: float) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "llmreplay.cli", "sim", "--host", "127.0.0.1", "--port", str(port)]
    cmd += [*BENCH_ENGINE, "--decode-base-ms", str(step_ms), "--log", str(log)]
    proc = subprocess.Popen(cmd, cwd=ROOT, stderr=subprocess.DEVNULL)
    _pin(proc.pid, SIM_CPU)
    try:
        wait_http_ok(f"http://127.0.0.1:{port}/health", proc)
    except (RuntimeError, TimeoutError):
        proc.kill()
        raise
    return proc


PIN = True


def _pin(pid: int, cpu: int) -> None:
    if PIN and hasattr(os, "sched_setaffinity") and os.cpu_count() and os.cpu_count() > cpu:
        os.sched_setaffinity(pid, {cpu})


def stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()


# -- load generator (runs in its own process: `bench_sim.py --client ...`) ---------------------


async def _client(url: str, rate_per_s: float, requests: int, max_tokens: int, max_inflight: int) -> dict:
    """Open loop: request i is due at start + i / rate (absolute deadlines), at most max_inflight open."""
    import aiohttp

    body = json.dumps(
        {
            "model": "sim-model",
            "messages": [{"role": "user", "content": "Say a few words."}],
            "max_tokens": max_tokens,
            "ignore_eos": True,
            "stream": True,
        }
    ).encode()
    headers = {"Content-Type": "application/json"}
    counts = {"ok": 0, "failed": 0, "shed": 0, "chunks": 0}
    inflight = [0]

    async def one(session):
        inflight[0] += 1
        try:
            async with session.post(url, data=body, headers=headers) as resp:
                chunks = 0
                tail = b""
                async for data in resp.content.iter_any():
                    chunks += data.count(b"data: ")
                    tail = (tail + data)[-32:]
                if resp.status == 200 and b"[DONE]" in tail:
                    counts["ok"] += 1
                    counts["chunks"] += chunks - 1  # minus the opening (role) event
                else:
                    counts["failed"] += 1
        except aiohttp.ClientError:
            counts["failed"] += 1
        finally:
            inflight[0] -= 1

    loop = asyncio.get_running_loop()
    connector = aiohttp.TCPConnector(limit=max_inflight)
    async with aiohttp.ClientSession(connector=connector) as session:
        tasks = []
        started = loop.time()
        for i in range(requests):
            delay = started + i / rate_per_s - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            if inflight[0] >= max_inflight:
                counts["shed"] += 1
                continue
            tasks.append(asyncio.ensure_future(one(session)))
        sending_s = loop.time() - started
        await asyncio.gather(*tasks)
        counts["wall_s"] = loop.time() - started
    counts["sending_s"] = sending_s
    return counts


def run_client(port: int, rate_per_s: float, requests: int, max_tokens: int, max_inflight: int) -> dict:
    cmd = [sys.executable, __file__, "--client", str(port), str(rate_per_s), str(requests), str(max_tokens)]
    cmd.append(str(max_inflight))
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, cwd=ROOT)
    _pin(proc.pid, CLIENT_CPU)
    out, _ = proc.communicate(timeout=requests / rate_per_s + 120)
    return json.loads(out)


def sim_figures(log: Path, window_ns: tuple[int, int]) -> dict:
    """From the sim's own logs, inside the steady window: request and token rates, step lateness."""
    import numpy as np
    import pyarrow.parquet as pq

    lo, hi = window_ns
    seconds = (hi - lo) / 1e9
    steps = pq.read_table(log.with_name(f"{log.stem}.steps.parquet"))
    end = np.asarray(steps.column("end_mono_ns"))
    inside = (end >= lo) & (end < hi)
    lateness_ms = np.asarray(steps.column("lateness_ns"))[inside] / 1e6
    tokens = int(np.asarray(steps.column("batch_size"))[inside].sum())
    emit_ns = int(np.asarray(steps.column("emit_ns"))[inside].sum())
    requests = pq.read_table(log, columns=["last_token_mono_ns", "outcome"]).to_pydict()
    done = sum(1 for t, o in zip(requests["last_token_mono_ns"], requests["outcome"], strict=True)
               if o == "ok" and t is not None and lo <= t < hi)  # fmt: skip
    p50, p99 = np.percentile(lateness_ms, [50, 99]) if lateness_ms.size else (float("nan"),) * 2
    return {
        "requests_per_s": round(done / seconds, 1),
        "chunks_per_s": round(tokens / seconds),
        "steps": int(lateness_ms.size),
        "step_lateness_p50_ms": round(float(p50), 3),
        "step_lateness_p99_ms": round(float(p99), 3),
        "emit_us_per_chunk": round(emit_ns / tokens / 1e3, 2) if tokens else None,
    }


def level(name: str, step_ms: float, rate_per_s: float, seconds: float, max_tokens: int) -> dict:
    """One open-loop load level against a fresh sim."""
    import psutil

    port = free_port()
    requests = int(rate_per_s * seconds)
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "gt.parquet"
        proc = start_sim(port, log, step_ms)
        sim_ps = psutil.Process(proc.pid)
        try:
            run_client(port, 100.0, 100, max_tokens, 1000)  # warm-up
            cpu0 = sim_ps.cpu_times()
            start_ns = time.perf_counter_ns()
            result = run_client(port, rate_per_s, requests, max_tokens, 4000)
            cpu1 = sim_ps.cpu_times()
        finally:
            stop(proc)
        # steady window: skip the client's start-up second and the drain after the last send
        window = (start_ns + 1_500_000_000, start_ns + int((0.5 + result["sending_s"]) * 1e9))
        figures = sim_figures(log, window)
    cpu_s = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
    return {
        "level": name,
        "offered_per_s": rate_per_s,
        "max_tokens": max_tokens,
        "step_ms": step_ms,
        "client_ok": result["ok"],
        "client_failed": result["failed"],
        "client_shed": result["shed"],
        **figures,
        "sim_cpu_share": round(cpu_s / result["wall_s"], 2),
        # what one dedicated core would sustain: client-counted work per CPU-second the sim used
        "requests_per_sim_cpu_s": round(result["ok"] / cpu_s),
        "chunks_per_sim_cpu_s": round(result["chunks"] / cpu_s),
        "load_avg_1m": round(os.getloadavg()[0], 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=8.0, help="sending time per load level")
    parser.add_argument(
        "--no-pin", action="store_true", help="let the OS place sim and client (busy shared box)"
    )
    args = parser.parse_args()
    global PIN
    PIN = not args.no_pin
    levels = [
        # short outputs (4 tokens): request rate
        ("short", 2.0, 500, 4),
        ("short", 2.0, 1000, 4),
        ("short", 2.0, 1500, 4),
        # long outputs (200 tokens): SSE chunk rate = offered rate x 200
        ("long", 5.0, 100, 200),
        ("long", 5.0, 250, 200),
        ("long", 5.0, 350, 200),
    ]
    placement = f"sim pinned to CPU {SIM_CPU}, client to CPU {CLIENT_CPU}" if PIN else "unpinned"
    print(f"# bench_sim: {placement}, open-loop client; "
          f"{args.seconds:g} s per level; rates measured by the sim in the steady window")  # fmt: skip
    for name, step_ms, rate, max_tokens in levels:
        print(json.dumps(level(name, step_ms, rate, args.seconds, max_tokens)), flush=True)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--client":
        port, rate, requests, max_tokens, max_inflight = sys.argv[2:7]
        url = f"http://127.0.0.1:{port}/v1/chat/completions"
        figures = _client(url, float(rate), int(requests), int(max_tokens), int(max_inflight))
        print(json.dumps(asyncio.run(figures)))
    else:
        main()
