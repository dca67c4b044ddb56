"""The replayer's own memory over a soak: a real `llmreplay replay --soak` against `llmreplay sim` on
127.0.0.1, its processes' RSS sampled every 0.5 s and read per loop (the first and the last complete one).

Prints, per worker and for the coordinator, the peak RSS during the first and the last loop and their
difference; a flat replayer shows (almost) none. Figures: docs/design/replay-memory.md.

    .venv/bin/python benchmarks/soak_memory.py [--soak 180s] [--rate 20] [--window-s 10] [--workers 1]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil
from _support import free_port, wait_http_ok

from llmreplay.durations import parse_duration_ns
from llmreplay.trace_format import TraceMeta, TraceRecord
from llmreplay.trace_io import write_trace

ROOT = Path(__file__).resolve().parents[1]
T0_US = 1_700_000_000_000_000
SAMPLE_S = 0.5


def write_window(path: Path, rate: float, window_s: float) -> int:
    """A content trace of `window_s` seconds at `rate` requests/s (streamed, 32 output tokens each)."""
    count = max(2, round(rate * window_s))
    records = [
        TraceRecord(
            request_id=f"r{i}",
            arrival_time=T0_US + round(i / rate * 1e6),
            endpoint="chat_completions",
            prompt_tokens=64,
            completion_tokens=32,
            token_source="server_usage",
            model="sim-model",
            stream=True,
            content_messages=json.dumps([{"role": "user", "content": f"soak question {i} " * 8}]),
        )
        for i in range(count)
    ]
    write_trace(path, records, TraceMeta(source="soak_memory", content=True))
    return count


class Sampler(threading.Thread):
    """(unix s, pid, rss bytes) of a process and its children, every SAMPLE_S, until stopped."""

    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.root = psutil.Process(pid)
        self.samples: list[tuple[float, int, int]] = []
        self.names: dict[int, str] = {}
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(SAMPLE_S):
            try:
                procs = [self.root, *self.root.children(recursive=True)]
            except psutil.NoSuchProcess:
                return
            now = time.time()
            for proc in procs:
                try:
                    if proc.pid not in self.names:
                        self.names[proc.pid] = _role(proc.cmdline())
                    self.samples.append((now, proc.pid, proc.memory_info().rss))
                except psutil.NoSuchProcess:
                    continue


def _role(cmdline: list[str]) -> str:
    text = " ".join(cmdline)
    if "llmreplay.cli" in text:
        return "coordinator"
    if "resource_tracker" in text:
        return "mp tracker"
    return "worker"


def per_loop_peaks(samples, start_s: float, span_s: float, loop: int) -> dict[int, float]:
    """Peak RSS (MB) by pid over the loop's stretch of the run's clock."""
    low, high = start_s + loop * span_s, start_s + (loop + 1) * span_s
    peaks: dict[int, float] = {}
    for at, pid, rss in samples:
        if low <= at < high:
            peaks[pid] = max(peaks.get(pid, 0.0), rss / 2**20)
    return peaks


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--soak", default="180s")
    parser.add_argument("--rate", type=float, default=20.0, help="requests/s of the looped window")
    parser.add_argument("--window-s", type=float, default=10.0)
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()
    soak_s = parse_duration_ns(args.soak, "--soak") / 1e9
    with tempfile.TemporaryDirectory(prefix="soak-memory-") as tmp:
        work = Path(tmp)
        count = write_window(work / "window.parquet", args.rate, args.window_s)
        port = free_port()
        sim = subprocess.Popen(
            [sys.executable, "-m", "llmreplay.cli", "sim", "--profile", "fast", "--port", str(port)],
            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=open(work / "sim.log", "w"),
        )  # fmt: skip
        try:
            wait_http_ok(f"http://127.0.0.1:{port}/health", sim, log=work / "sim.log")
            cmd = [sys.executable, "-m", "llmreplay.cli", "replay", str(work / "window.parquet"),
                   "--target", f"http://127.0.0.1:{port}", "-o", str(work / "run"), "--skip-preflight",
                   "--quiet", "--soak", args.soak, "--workers", str(args.workers)]  # fmt: skip
            replay = subprocess.Popen(
                cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=open(work / "replay.log", "w")
            )
            sampler = Sampler(replay.pid)
            sampler.start()
            replay.wait(timeout=soak_s + 300)
            sampler.stop.set()
            sampler.join()
        finally:
            sim.terminate()
            sim.wait(timeout=30)
        if replay.returncode not in (0, 1):
            print((work / "replay.log").read_text()[-2000:], file=sys.stderr)
            return 2
        info = json.loads((work / "run" / "run.json").read_text())
    phases = info["phases"]
    start_s = info["start_unix_ns"] / 1e9
    span_s = phases["loop_span_s"]
    measured_s = start_s + phases["measured_start_offset_s"]
    last = phases["loops_completed"] - 1
    first_peaks = per_loop_peaks(sampler.samples, measured_s, span_s, 0)
    last_peaks = per_loop_peaks(sampler.samples, measured_s, span_s, last)
    print(f"soak {soak_s:g} s of a {args.window_s:g} s window ({count} requests, {args.rate:g}/s): "
          f"loops planned {phases['loops_planned']}, completed {phases['loops_completed']}, "
          f"sent {info['counts']['sent']:,}, loop span {span_s:.2f} s")  # fmt: skip
    names = sampler.names
    for pid in sorted(set(first_peaks) | set(last_peaks)):
        name = f"{names.get(pid, 'process')} {pid}"
        a, b = first_peaks.get(pid), last_peaks.get(pid)
        if a is None or b is None:
            continue
        print(f"  {name:>12}: peak RSS loop 0 {a:7.1f} MB, loop {last} {b:7.1f} MB, change {b - a:+6.1f} MB")
    series: dict[int, list[str]] = {}
    for loop in range(phases["loops_completed"]):
        for pid, peak in per_loop_peaks(sampler.samples, measured_s, span_s, loop).items():
            series.setdefault(pid, []).append(f"{peak:.1f}")
    for pid, peaks in sorted(series.items()):
        print(f"  {names.get(pid, 'process')} {pid} peak RSS MB by loop: {' '.join(peaks)}")
    for worker in info["workers"]:
        print(f"  worker {worker['worker']} peak RSS over the run (run.json): {worker['max_rss_mb']} MB")
    print(f"  coordinator peak RSS over the run (run.json): {info['coordinator_max_rss_mb']} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
