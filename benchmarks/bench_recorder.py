"""Recorder overhead: direct to `llmreplay sim` vs bare mitmproxy (streaming passthrough) vs `llmreplay record`.

Prints added TTFT and added last-chunk delay (p50/p99) per concurrency, throughput, proxy CPU per
1,000 requests and per 1,000 chunks, memory over many requests, and buffered vs streamed TTFT.
All paths are measured in the same run, interleaved, so the (shared, noisy) machine affects them alike.

    .venv/bin/python benchmarks/bench_recorder.py [--concurrency 1,16,64] [--memory-requests 20000]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import orjson
import psutil

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable


# -- the bare proxies (same minimal mitmproxy master as the recorder, without the recorder) ------------
class StreamAll:
    """The architecture's floor: stream every response through, observe nothing."""

    def responseheaders(self, flow) -> None:
        flow.response.stream = True


async def serve_bare(port: int, upstream: str, stream: bool) -> None:
    from mitmproxy import options
    from mitmproxy.addons import core, errorcheck, next_layer, proxyserver, tlsconfig
    from mitmproxy.master import Master

    opts = options.Options()
    master = Master(opts)
    master.addons.add(
        core.Core(),
        proxyserver.Proxyserver(),
        next_layer.NextLayer(),
        tlsconfig.TlsConfig(),
        errorcheck.ErrorCheck(),
    )
    if stream:
        master.addons.add(StreamAll())
    opts.update(mode=[f"reverse:{upstream}"], listen_host="127.0.0.1", listen_port=port, connection_strategy="lazy",
                confdir=tempfile.mkdtemp(prefix="bench-mitm-"))  # fmt: skip
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, master.shutdown)
    await master.run()


# -- processes -----------------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_ok(url: str, proc: subprocess.Popen, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"process for {url} exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"{url} not ready")


@dataclass
class Path_:
    name: str
    base: str
    proc: subprocess.Popen | None = None  # the proxy process whose CPU and memory we measure
    samples: dict = field(default_factory=dict)


def start(cmd: list[str], ready: str, log: Path) -> subprocess.Popen:
    proc = subprocess.Popen(cmd, stdout=open(log, "wb"), stderr=subprocess.STDOUT, cwd=ROOT)
    wait_ok(ready, proc)
    return proc


# -- load ----------------------------------------------------------------------------------------------
@dataclass
class Result:
    ttft_ns: list[int] = field(default_factory=list)
    last_ns: list[int] = field(default_factory=list)
    chunks: int = 0
    errors: int = 0
    wall_s: float = 0.0


async def one_request(session, url: str, body: bytes, result: Result) -> None:
    from llmreplay.sse import SSESplitter

    start = time.perf_counter_ns()
    first = last = None
    splitter = SSESplitter()
    try:
        async with session.post(url, data=body, headers={"Content-Type": "application/json"}) as response:
            if response.status != 200:
                result.errors += 1
                return
            async for data in response.content.iter_any():
                now = time.perf_counter_ns()
                for payload in splitter.feed(data):
                    if payload == b"[DONE]":
                        continue
                    choices = orjson.loads(payload).get("choices") or ()
                    if choices and (choices[0].get("delta") or {}).get("content"):
                        first = first or now
                        last = now
                        result.chunks += 1
    except Exception:  # noqa: BLE001 - counted; a benchmark keeps going
        result.errors += 1
        return
    if first is not None:
        result.ttft_ns.append(first - start)
        result.last_ns.append(last - start)


SENT: dict[str, int] = {}


async def run_load(base: str, concurrency: int, requests: int, max_tokens: int) -> Result:
    import aiohttp

    SENT[base] = SENT.get(base, 0) + requests
    body = orjson.dumps({"model": "sim-model", "messages": [{"role": "user", "content": "benchmark " * 20}],
                         "stream": True, "max_tokens": max_tokens, "ignore_eos": True})  # fmt: skip
    url = f"{base}/v1/chat/completions"
    result, remaining = Result(), [requests]
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(
        connector=connector, timeout=aiohttp.ClientTimeout(total=120)
    ) as session:

        async def worker():
            while remaining[0] > 0:
                remaining[0] -= 1
                await one_request(session, url, body, result)

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        result.wall_s = time.perf_counter() - t0
    return result


def pct(values, q) -> float:
    return float(np.percentile(np.asarray(values, dtype=float), q)) / 1e6 if values else float("nan")


def cpu_s(proc: subprocess.Popen) -> float:
    times = psutil.Process(proc.pid).cpu_times()
    return times.user + times.system


def rss_mb(proc: subprocess.Popen) -> float:
    return psutil.Process(proc.pid).memory_info().rss / 1e6


# -- main ----------------------------------------------------------------------------------------------
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", default="1,16,64")
    parser.add_argument(
        "--requests-per-stream", type=int, default=20, help="requests per concurrent stream per path"
    )
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--memory-requests", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=2, help="interleaved repetitions of each latency phase")
    parser.add_argument("--phases", default="latency,cpu,throughput,memory")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-recorder-"))
    procs: list[subprocess.Popen] = []
    try:
        sim_port = free_port()
        sim = f"http://127.0.0.1:{sim_port}"
        procs.append(
            start(
                [PY, "-m", "llmreplay.cli", "sim", "--port", str(sim_port), "--profile", "fast"],
                f"{sim}/health",
                work / "sim.log",
            )
        )
        paths = {"direct": Path_("direct", sim)}
        for name, stream in (("bare", True), ("buffered", False)):
            port = free_port()
            cmd = [PY, __file__, "--serve-bare", str(port), sim, "1" if stream else "0"]
            paths[name] = Path_(
                name,
                f"http://127.0.0.1:{port}",
                start(cmd, f"http://127.0.0.1:{port}/health", work / f"{name}.log"),
            )
            procs.append(paths[name].proc)
        port = free_port()
        cmd = [PY, "-m", "llmreplay.cli", "record", "--upstream", sim, "--listen", f"127.0.0.1:{port}", "-o", str(work / "trace"),
               "--key-file", str(work / "key"), "--confdir", str(work / "mitm"), "--stats-interval", "30s"]  # fmt: skip
        paths["recorder"] = Path_(
            "recorder",
            f"http://127.0.0.1:{port}",
            start(cmd, f"http://127.0.0.1:{port}/health", work / "recorder.log"),
        )
        procs.append(paths["recorder"].proc)
        asyncio.run(run_all(paths, args))
    finally:
        for proc in reversed(procs):
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
        print(f"\nlogs and trace in {work}")
    if (work / "trace").exists():
        from llmreplay.trace_io import read_trace

        rows = read_trace(work / "trace").table.num_rows
        print(f"recorder: {SENT.get(paths['recorder'].base, 0)} requests sent, {rows} rows in the trace")


async def run_all(paths: dict[str, Path_], args) -> None:
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} at start")
    await run_load(paths["recorder"].base, 4, 40, 4)  # warm-up (tokenizer, connections)
    phases = {
        "latency": latency_phase,
        "cpu": cpu_phase,
        "throughput": throughput_phase,
        "memory": memory_phase,
    }
    for name in args.phases.split(","):
        await phases[name](paths, args)


async def latency_phase(paths: dict[str, Path_], args) -> None:
    print(
        f"\n== latency (client side, streaming, max_tokens={args.max_tokens}); added = path - direct, same run"
    )
    header = (
        "conc",
        "path",
        "TTFT p50",
        "p99",
        "add p50",
        "add p99",
        "last p50",
        "add last p50",
        "add last p99",
    )
    print(" ".join(f"{h:>{max(len(h), 5)}}" for h in header), "  req/s chunks/s err")
    for conc in [int(c) for c in args.concurrency.split(",")]:
        names = ["direct", "bare", "recorder"] + (["buffered"] if conc <= 16 else [])
        merged = {name: Result() for name in names}
        for _ in range(args.rounds):
            for name in names:
                r = await run_load(paths[name].base, conc, conc * args.requests_per_stream, args.max_tokens)
                m = merged[name]
                m.ttft_ns += r.ttft_ns
                m.last_ns += r.last_ns
                m.chunks += r.chunks
                m.errors += r.errors
                m.wall_s += r.wall_s
        d = merged["direct"]
        for name in names:
            m = merged[name]
            cells = (
                pct(m.ttft_ns, 50), pct(m.ttft_ns, 99), pct(m.ttft_ns, 50) - pct(d.ttft_ns, 50),
                pct(m.ttft_ns, 99) - pct(d.ttft_ns, 99), pct(m.last_ns, 50), pct(m.last_ns, 50) - pct(d.last_ns, 50),
                pct(m.last_ns, 99) - pct(d.last_ns, 99),
            )  # fmt: skip
            widths = [8, 7, 7, 8, 12, 12]
            print(f"{conc:>5} {name:>8}", " ".join(f"{v:>{w}.2f}" for v, w in zip(cells, [8] + widths, strict=True)),
                  f"{len(m.ttft_ns) / m.wall_s:7.1f} {m.chunks / m.wall_s:8.0f} {m.errors:3}")  # fmt: skip
    print(
        "   (ms; 'last' = time to the last content chunk, so 'add last' is the delay added to the final chunk)"
    )


async def cpu_phase(paths: dict[str, Path_], args) -> None:
    """CPU per request and per chunk from two loads (1 and 64 tokens): cpu/request = a + b * chunks/request."""
    print(
        "\n== proxy CPU (process user+sys), concurrency 16, bare and recorder interleaved, median of rounds"
    )
    estimates: dict[str, list[tuple[float, float]]] = {"bare": [], "recorder": []}
    for _ in range(args.rounds + 1):
        for name in ("bare", "recorder"):
            proc, points = paths[name].proc, []
            for tokens, requests in ((1, 400), (64, 200)):
                c0 = cpu_s(proc)
                r = await run_load(paths[name].base, 16, requests, tokens)
                await asyncio.sleep(0.3)  # let the writer thread finish the batch it was given
                points.append((len(r.ttft_ns), r.chunks, cpu_s(proc) - c0))
            (n1, k1, c1), (n2, k2, c2) = points
            per_chunk = (c2 / n2 - c1 / n1) / (k2 / n2 - k1 / n1)
            estimates[name].append((c1 / n1 - per_chunk * k1 / n1, per_chunk))
    cost = {}
    for name, values in estimates.items():
        per_request = float(np.median([v[0] for v in values]))
        per_chunk = float(np.median([v[1] for v in values]))
        cost[name] = (per_request, per_chunk)
        print(f"{name:>9}: {per_request * 1e6:7.1f} ms CPU per 1,000 requests   {per_chunk * 1e6:6.1f} ms CPU per 1,000 chunks"
              f"   (rounds: {', '.join(f'{a * 1e6:.0f}/{b * 1e6:.0f}' for a, b in values)})")  # fmt: skip
    (br, bc), (rr, rc) = cost["bare"], cost["recorder"]
    print(f"recorder / bare: per request {rr / br:.2f}x, per chunk {rc / bc:.2f}x")


async def throughput_phase(paths: dict[str, Path_], args) -> None:
    print(
        "\n== throughput at saturation, concurrency 64, max_tokens=4 (closed loop; the sim is not the limit)"
    )
    for name in ("direct", "bare", "recorder"):
        r = await run_load(paths[name].base, 64, 1500, 4)
        print(f"{name:>9}: {len(r.ttft_ns) / r.wall_s:7.1f} req/s  errors {r.errors}")


async def memory_phase(paths: dict[str, Path_], args) -> None:
    print(f"\n== recorder memory over {args.memory_requests} requests (concurrency 64, max_tokens=4)")
    proc, batches = paths["recorder"].proc, 10
    print(f"  after     0: RSS {rss_mb(proc):7.1f} MB")
    for i in range(batches):
        r = await run_load(paths["recorder"].base, 64, args.memory_requests // batches, 4)
        done = (i + 1) * args.memory_requests // batches
        print(
            f"  after {done:>5}: RSS {rss_mb(proc):7.1f} MB  ({len(r.ttft_ns) / r.wall_s:.0f} req/s, {r.errors} errors)"
        )


if __name__ == "__main__":
    if len(sys.argv) >= 5 and sys.argv[1] == "--serve-bare":
        asyncio.run(serve_bare(int(sys.argv[2]), sys.argv[3], sys.argv[4] == "1"))
    else:
        main()
