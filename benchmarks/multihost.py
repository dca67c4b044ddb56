"""One replay on one host versus the same replay split over 2 and 4 "hosts" (replay processes started
together by `llmreplay barrier`, then `llmreplay merge`d), against the same `llmreplay sim` on 127.0.0.1.

Prints, per layout: requests, the client's dispatch lag p50/p99, the server's arrival error against the
merged schedule (sim ground truth, wall clock) p50/p99/max, and the merged run's cross-host clock bound.
All the "hosts" share this machine's cores: the figure is the method's cost, not a cluster's.

    .venv/bin/python benchmarks/multihost.py [--sessions 300] [--turns 4] [--span-s 20] [--repeats 1]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
from _support import free_port, wait_http_ok

from llmreplay.tokenizers import load_tokenizer
from llmreplay.trace_format import TraceMeta, TraceRecord
from llmreplay.trace_io import write_trace

ROOT = Path(__file__).resolve().parents[1]
T0_US = 1_767_225_600_000_000


def session_trace(path: Path, sessions: int, turns: int, span_s: float) -> Path:
    tokenizer, rng, records, i = load_tokenizer(), np.random.default_rng(7), [], 0
    for s in range(sessions):
        at_ms = float(rng.uniform(0, span_s * 1000))
        for turn in range(turns):
            text = f"session {s} turn {turn} question"
            records.append(
                TraceRecord(
                    request_id=f"r{i}", session_id=f"s{s}", turn_index=turn, arrival_time=T0_US + int(at_ms * 1000),
                    think_time_ns=300_000_000 if turn else None, endpoint="chat_completions", model="sim-model",
                    stream=True, prompt_tokens=len(tokenizer.encode(text)), completion_tokens=int(rng.integers(8, 40)),
                    token_source="server_usage", content_messages=json.dumps([{"role": "user", "content": text}]),
                )
            )  # fmt: skip
            i += 1
            at_ms += 500.0
    records.sort(key=lambda r: r.arrival_time)
    write_trace(path, records, TraceMeta(source="benchmark", content=True))
    return path


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "llmreplay.cli", *args]


def start(cmd: list[str], log: Path) -> subprocess.Popen:
    return subprocess.Popen(cmd, cwd=ROOT, stdout=log.open("w"), stderr=subprocess.STDOUT)


def one_layout(work: Path, trace: Path, shards: int) -> dict:
    port = free_port()
    truth = work / "truth.parquet"
    sim = start(cli("sim", "--port", str(port), "--profile", "fast", "--log", str(truth)), work / "sim.log")
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http_ok(f"{url}/health", sim, 60, work / "sim.log")
        if shards == 1:
            run = work / "run"
            subprocess.run(
                cli("replay", str(trace), "--target", url, "-o", str(run), "--quiet"), cwd=ROOT, check=False
            )
        else:
            bport = free_port()
            barrier = start(
                cli("barrier", "--shards", str(shards), "--port", str(bport), "--lead", "2s"), work / "b.log"
            )
            wait_http_ok(f"http://127.0.0.1:{bport}/time", barrier, 30, work / "b.log")
            procs = [
                subprocess.Popen(
                    cli(
                        "replay",
                        str(trace),
                        "--target",
                        url,
                        "-o",
                        str(work / f"shard-{k}"),
                        "--quiet",
                        "--shard",
                        f"{k}/{shards}",
                        "--start-barrier",
                        f"http://127.0.0.1:{bport}",
                    ),
                    cwd=ROOT,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )  # fmt: skip
                for k in range(shards)
            ]
            for proc in procs:
                proc.wait(timeout=600)
            barrier.wait(timeout=60)
            run = work / "merged"
            subprocess.run(
                cli("merge", *(str(work / f"shard-{k}") for k in range(shards)), "-o", str(run)),
                cwd=ROOT, check=False, stdout=subprocess.DEVNULL,
            )  # fmt: skip
    finally:
        sim.send_signal(signal.SIGTERM)
        sim.wait(timeout=60)
    info = json.loads((run / "run.json").read_text())
    rows = pq.read_table(run / "results.parquet").to_pylist()
    arrivals = {r["request_id"]: r["arrival_unix_ns"] for r in pq.read_table(truth).to_pylist()}
    base = info["start_unix_ns"]
    sent = [r for r in rows if r["sent_offset_ns"] is not None and r["request_id"] in arrivals]
    error_ms = np.array([arrivals[r["request_id"]] - base - r["scheduled_offset_ns"] for r in sent]) / 1e6
    lag_ms = np.array([r["dispatch_lag_ns"] for r in sent]) / 1e6
    clock = info.get("clock") or {}
    bound = clock.get("cross_host_bound_ns")
    return {
        "shards": shards,
        "requests": len(sent),
        "lag_p50_ms": float(np.percentile(lag_ms, 50)),
        "lag_p99_ms": float(np.percentile(lag_ms, 99)),
        "arrival_p50_ms": float(np.percentile(error_ms, 50)),
        "arrival_p99_ms": float(np.percentile(error_ms, 99)),
        "arrival_max_ms": float(error_ms.max()),
        "clock_bound_ms": None if bound is None else bound / 1e6,
        "verdict": info["summary"]["verdict"]["headline"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=300)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--span-s", type=float, default=20.0)
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    with tempfile.TemporaryDirectory(prefix="multihost-") as tmp:
        trace = session_trace(Path(tmp) / "trace.parquet", args.sessions, args.turns, args.span_s)
        print(
            f"trace: {args.sessions} sessions x {args.turns} turns over ~{args.span_s:.0f} s; sim fast profile"
        )
        print(f"{'layout':>9} {'requests':>8} {'lag p50':>8} {'lag p99':>8} {'arr p50':>8} {'arr p99':>8} "
              f"{'arr max':>8} {'clock':>8}  verdict")  # fmt: skip
        for shards in (1, 2, 4):
            results = []
            for repeat in range(args.repeats):
                work = Path(tmp) / f"s{shards}-{repeat}"
                work.mkdir()
                results.append(one_layout(work, trace, shards))
            med = {k: statistics.median(r[k] for r in results) if isinstance(results[0][k], float) else results[0][k]
                   for k in results[0]}  # fmt: skip
            clock = "-" if med["clock_bound_ms"] is None else f"{med['clock_bound_ms']:.2f}"
            print(
                f"{('1 host' if shards == 1 else f'{shards} shards'):>9} {med['requests']:>8} {med['lag_p50_ms']:>8.2f} "
                f"{med['lag_p99_ms']:>8.2f} {med['arrival_p50_ms']:>8.2f} {med['arrival_p99_ms']:>8.2f} "
                f"{med['arrival_max_ms']:>8.2f} {clock:>8}  {med['verdict']}"
            )


if __name__ == "__main__":
    main()
