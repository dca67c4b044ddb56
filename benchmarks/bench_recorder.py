"""Recorder overhead: direct to `llmreplay sim` vs bare mitmproxy (streaming passthrough) vs `llmreplay record`.

Prints added TTFT and added last-chunk delay (p50/p99) per concurrency, throughput, CPU per 1,000
requests and per 1,000 chunks (the proxy process alone, and proxy + converter process), event-loop
lag of bare mitmproxy and of the recorder, memory over many requests, and buffered vs streamed TTFT.
All paths are measured in the same run, interleaved, so the (shared, noisy) machine affects them alike.

    .venv/bin/python benchmarks/bench_recorder.py [--concurrency 1,16,64] [--memory-requests 20000]
        [--old-recorder DIR]   # also measure the recorder package found in DIR/recorder (e.g. a git archive)
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import orjson
import psutil
from _support import free_port, wait_http_ok

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable


# -- the bare proxies (same minimal mitmproxy master as the recorder, without the recorder) ------------
class StreamAll:
    """The architecture's floor: stream every response through, observe nothing (but log loop lag,
    measured the same way as the recorder does, so both lags come from one method)."""

    def running(self) -> None:
        from recorder.monitor import LagMonitor

        self.lag = LagMonitor()
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self.lag.run()), loop.create_task(self._report())]

    async def _report(self) -> None:
        while True:
            await asyncio.sleep(5)
            print(f"bare loop_lag_ms={self.lag.take_summary_ms()}", flush=True)

    def responseheaders(self, flow) -> None:
        flow.response.stream = True


async def serve_bare(port: int, upstream: str, stream: bool) -> None:
    from recorder.embedded import minimal_master

    opts, master = minimal_master()
    if stream:
        master.addons.add(StreamAll())
    opts.update(mode=[f"reverse:{upstream}"], listen_host="127.0.0.1", listen_port=port, connection_strategy="lazy",
                confdir=tempfile.mkdtemp(prefix="bench-mitm-"))  # fmt: skip
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, master.shutdown)
    await master.run()


# -- processes -----------------------------------------------------------------------------------------
@dataclass
class Path_:
    name: str
    base: str
    proc: subprocess.Popen | None = None  # the proxy process whose CPU and memory we measure
    samples: dict = field(default_factory=dict)


def start(cmd: list[str], ready: str, log: Path, cwd: Path = ROOT) -> subprocess.Popen:
    proc = subprocess.Popen(cmd, stdout=open(log, "wb"), stderr=subprocess.STDOUT, cwd=cwd)
    wait_http_ok(ready, proc, log=log)
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


def cpu_s(proc: subprocess.Popen, with_children: bool = False) -> float:
    """User+sys CPU seconds of the proxy process, plus its live child processes (the converter)."""
    process = psutil.Process(proc.pid)
    members = [process] + (process.children(recursive=True) if with_children else [])
    total = 0.0
    for member in members:
        try:
            times = member.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
    return total


def rss_mb(proc: subprocess.Popen) -> float:
    return psutil.Process(proc.pid).memory_info().rss / 1e6


def children_rss_mb(proc: subprocess.Popen) -> float:
    return sum(child.memory_info().rss for child in psutil.Process(proc.pid).children(recursive=True)) / 1e6


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
    parser.add_argument(
        "--cpu-requests", type=int, default=400, help="requests per CPU sample (1-token load)"
    )
    parser.add_argument(
        "--old-recorder", type=Path, default=None, help="DIR holding an older recorder/ package"
    )
    args = parser.parse_args()
    work = args.work = Path(tempfile.mkdtemp(prefix="bench-recorder-"))
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
               "--key-file", str(work / "key"), "--confdir", str(work / "mitm"), "--stats-interval", "5s"]  # fmt: skip
        paths["recorder"] = Path_(
            "recorder",
            f"http://127.0.0.1:{port}",
            start(cmd, f"http://127.0.0.1:{port}/health", work / "recorder.log"),
        )
        procs.append(paths["recorder"].proc)
        if args.old_recorder:
            port = free_port()
            cmd = [PY, "-m", "llmreplay.cli", "record", "--upstream", sim, "--listen", f"127.0.0.1:{port}",
                   "-o", str(work / "trace-old"), "--key-file", str(work / "key"), "--confdir", str(work / "mitm"),
                   "--stats-interval", "30s"]  # fmt: skip
            paths["old"] = Path_(
                "old",
                f"http://127.0.0.1:{port}",
                start(cmd, f"http://127.0.0.1:{port}/health", work / "old.log", cwd=args.old_recorder),
            )
            procs.append(paths["old"].proc)
        asyncio.run(run_all(paths, args))
    finally:
        for proc in reversed(procs):
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
        print(f"\nlogs and trace in {work}")
    print_lag(work, {}, "whole run (all phases; saturation phases inflate the recorder's figure)")
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
    starts = {name: log_size(args.work / f"{name}.log") for name in ("bare", "recorder")}
    await latency_runs(paths, args)
    print_lag(args.work, starts, "latency phase (concurrency " + args.concurrency + ")")


def log_size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


async def latency_runs(paths: dict[str, Path_], args) -> None:
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
        names = ["direct", "bare", "recorder"] + (["old"] if "old" in paths else [])
        names += ["buffered"] if conc <= 16 else []
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
    """CPU per request and per chunk from two loads (1 and 64 tokens): cpu/request = a + b * chunks/request.

    Two scopes: the proxy process alone (what the issue's target is about: it is the process on the
    traffic's path), and proxy + children (the converter does the parsing, tokenizing and writing).
    """
    names = ["bare", "recorder"] + (["old"] if "old" in paths else [])
    print(f"\n== CPU (user+sys), concurrency 16, {', '.join(names)} interleaved, median of rounds")
    estimates = {(name, scope): [] for name in names for scope in ("proxy", "total")}
    raw = {(name, scope): [] for name in names for scope in ("proxy", "total")}
    for _ in range(args.rounds + 1):
        for name in names:
            proc, points = paths[name].proc, []
            for tokens, requests in ((1, args.cpu_requests), (64, args.cpu_requests // 2)):
                c0, t0 = cpu_s(proc), cpu_s(proc, with_children=True)
                r = await run_load(paths[name].base, 16, requests, tokens)
                await asyncio.sleep(1.0)  # the converter (or writer thread) files the last batch
                points.append((len(r.ttft_ns), r.chunks, cpu_s(proc) - c0, cpu_s(proc, True) - t0))
            for scope, index in (("proxy", 2), ("total", 3)):
                (n1, k1), (n2, k2) = points[0][:2], points[1][:2]
                c1, c2 = points[0][index], points[1][index]
                per_chunk = (c2 / n2 - c1 / n1) / (k2 / n2 - k1 / n1)
                estimates[(name, scope)].append((c1 / n1 - per_chunk * k1 / n1, per_chunk))
                raw[(name, scope)].append((c1 / n1,))
    cost = {}
    for (name, scope), values in estimates.items():
        per_request = float(np.median([v[0] for v in values]))
        per_chunk = float(np.median([v[1] for v in values]))
        cost[(name, scope)] = (per_request, per_chunk)
        print(f"{name:>9} {scope:>5}: {per_request * 1e6:7.1f} ms CPU per 1,000 requests   {per_chunk * 1e6:6.1f} ms "
              f"per 1,000 chunks   (rounds: {', '.join(f'{a * 1e6:.0f}/{b * 1e6:.0f}' for a, b in values)})")  # fmt: skip
    raw_bare = float(np.median([p[0] for p in raw[("bare", "proxy")]])) * 1e6
    for name in names[1:]:
        for scope in ("proxy", "total"):
            (br, bc), (rr, rc) = cost[("bare", "proxy")], cost[(name, scope)]
            print(f"{name} {scope} / bare proxy: per request {rr / br:.2f}x, per chunk {rc / bc:.2f}x")
    print("   (bare has no child process: its total equals its proxy figure)")
    print("   measured directly, no fit: CPU per 1,000 requests of the 1-token load, median of rounds")
    for name in names:
        for scope in ("proxy", "total"):
            direct = float(np.median([p[0] for p in raw[(name, scope)]])) * 1e6
            print(f"{name:>9} {scope:>5}: {direct:7.1f} ms   ({direct / raw_bare:.2f}x bare)")


async def throughput_phase(paths: dict[str, Path_], args) -> None:
    print(
        "\n== throughput at saturation, concurrency 64, max_tokens=4 (closed loop; the sim is not the limit)"
    )
    for name in ("direct", "bare", "recorder", "old"):
        if name not in paths:
            continue
        r = await run_load(paths[name].base, 64, 1500, 4)
        print(f"{name:>9}: {len(r.ttft_ns) / r.wall_s:7.1f} req/s  errors {r.errors}")


async def memory_phase(paths: dict[str, Path_], args) -> None:
    print(f"\n== recorder memory over {args.memory_requests} requests (concurrency 64, max_tokens=4)")
    proc, batches = paths["recorder"].proc, 10
    print(f"  after      0: proxy RSS {rss_mb(proc):7.1f} MB   converter RSS {children_rss_mb(proc):7.1f} MB")
    t0 = time.perf_counter()
    for i in range(batches):
        r = await run_load(paths["recorder"].base, 64, args.memory_requests // batches, 4)
        done = (i + 1) * args.memory_requests // batches
        print(f"  after {done:>6}: proxy RSS {rss_mb(proc):7.1f} MB   converter RSS {children_rss_mb(proc):7.1f} MB"
              f"  ({len(r.ttft_ns) / r.wall_s:.0f} req/s, {r.errors} errors, {time.perf_counter() - t0:.0f} s)")  # fmt: skip


def print_lag(work: Path, starts: dict[str, int], what: str) -> None:
    """Loop-lag percentiles logged every 5 s by both proxies since `starts` (log offsets): median p50, p99s."""
    import re

    print(f"\n== event-loop lag during the {what} (20 ms sleeps; lag = delay added to every chunk in flight)")
    for name in ("bare", "recorder"):
        log = work / f"{name}.log"
        text = log.read_bytes()[starts.get(name, 0) :].decode(errors="replace") if log.exists() else ""
        p50s = [float(v) for v in re.findall(r"loop_lag_ms=\{'p50': ([0-9.]+)", text)]
        p99s = [float(v) for v in re.findall(r"loop_lag_ms=\{'p50': [0-9.]+, 'p99': ([0-9.]+)", text)]
        if p50s:
            print(f"{name:>9}: p50 {np.median(p50s):6.2f} ms (median of {len(p50s)} periods)   "
                  f"p99 median {np.median(p99s):6.2f} ms, worst period {max(p99s):6.2f} ms")  # fmt: skip


if __name__ == "__main__":
    if len(sys.argv) >= 5 and sys.argv[1] == "--serve-bare":
        asyncio.run(serve_bare(int(sys.argv[2]), sys.argv[3], sys.argv[4] == "1"))
    else:
        main()
