"""Replay fidelity and client cost against `llmreplay sim` on 127.0.0.1, measured at the server;
llmreplay and AIPerf side by side on the same traces, sims and method.

For each Mooncake-style shape: generate a shape trace, start a sim with a ground-truth log and
room for the whole load, replay it with llmreplay, then (fresh sim) with AIPerf's fixed-schedule
Mooncake replay of `llmreplay export mooncake`. From the sim's log: dispatch lag (server arrival -
scheduled), TTFT error (client's first token - the sim's write of it), ITL error (client vs sim
mean inter-token gap). From a process-tree sampler: client CPU-s per 1,000 requests over the run
window and peak RSS (all client processes summed). `--quick` runs 10 s per shape; `--sweep`
finds the highest rate of a shape (`--sweep-shape`, default short) at which llmreplay keeps lag
p99 <= 5 ms and TTFT err p99 <= 2 ms. `--pin` puts the sim on its own CPU; `--rt` runs sim and
client SCHED_FIFO, so other jobs on a shared machine do not decide the figures. `--memory N,M`
reports the replay processes' peak RSS for traces of N and M requests (memory per 1,000 requests);
2 s of each is sent, or all of it at `--memory-send-speed S` (the results then count too).

AIPerf lives in its own virtual environment (default /tmp/aiperf-venv, created on first use with
`pip install aiperf`); it gets a small local tokenizer through an HF cache directory, since this
machine has no Hub access. If it cannot be installed or run, the script says so and carries on.

    .venv/bin/python benchmarks/bench_replay.py [--quick] [--shapes light,long,short] [--workers N]
        [--no-aiperf] [--sweep 204,300,400 [--sweep-shape long]] [--repeat N] [--pin] [--rt]
        [--memory 2000,30000 [--memory-send-speed 1]]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import psutil
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from _support import free_port, wait_http_ok  # noqa: E402

from llmreplay.trace_format import TraceMeta, TraceRecord  # noqa: E402
from llmreplay.trace_io import write_trace  # noqa: E402

T0_US = 1_700_000_000_000_000
BLOCK_SIZE = 512
LAG_BOUND_MS = 5.0
TTFT_ERR_BOUND_MS = 2.0
SAMPLE_INTERVAL_S = 0.2
AIPERF_VENV = Path(os.environ.get("AIPERF_VENV", "/tmp/aiperf-venv"))
AIPERF_TOKENIZER = "local/bench-tokenizer"  # a repo id in our own HF cache directory
PINNING: dict[str, set[int]] = {}  # with --pin: "sim" -> its CPU, "client" -> the others
REALTIME = {"on": False}  # with --rt: sim and client run SCHED_FIFO, ahead of other jobs on the machine


def pinned(role: str):
    """A preexec_fn that pins the child to its role's CPUs and/or gives it real-time priority."""
    cpus, rt = PINNING.get(role), REALTIME["on"]
    if cpus is None and not rt:
        return None

    def apply() -> None:
        if cpus is not None:
            os.sched_setaffinity(0, cpus)
        if rt:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))

    return apply


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
                arrival_time=T0_US + round(at_s * 1e6),
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


# -- processes ------------------------------------------------------------------------------------
def start_sim(log: Path, out: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    cmd = [
        sys.executable, "-m", "llmreplay.cli", "sim", "--host", "127.0.0.1", "--port", str(port),
        "--profile", "fast", "--log", str(log), "--max-num-seqs", "4096", "--max-waiting", "100000",
        "--kv-cache-tokens", "100000000",
    ]  # fmt: skip
    proc = subprocess.Popen(
        cmd, cwd=ROOT, stdout=open(out, "wb"), stderr=subprocess.STDOUT, preexec_fn=pinned("sim")
    )
    url = f"http://127.0.0.1:{port}"
    wait_http_ok(url + "/health", proc, 60, log=out)
    return proc, url


def stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)


class TreeSampler:
    """Samples CPU seconds and RSS of a process and all its descendants (the whole client)."""

    def __init__(self, pid: int):
        self.root = psutil.Process(pid)
        self.samples: list[tuple[int, float, int]] = []  # (unix_ns, cpu_s so far, rss bytes now)
        self._cpu_by_pid: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(SAMPLE_INTERVAL_S)

    def sample(self) -> None:
        try:
            procs = [self.root, *self.root.children(recursive=True)]
        except psutil.Error:
            return
        rss = 0
        for proc in procs:
            try:
                with proc.oneshot():
                    times = proc.cpu_times()
                    self._cpu_by_pid[proc.pid] = times.user + times.system
                    rss += proc.memory_info().rss
            except psutil.Error:
                continue
        self.samples.append((time.time_ns(), sum(self._cpu_by_pid.values()), rss))

    def close(self) -> None:
        self._stop.set()
        self._thread.join()

    def window(self, start_unix_ns: int, end_unix_ns: int) -> dict:
        """CPU spent and peak RSS between two wall times; peak RSS of the whole life too."""
        inside = [s for s in self.samples if start_unix_ns <= s[0] <= end_unix_ns]
        before = [s for s in self.samples if s[0] < start_unix_ns]
        cpu0 = before[-1][1] if before else 0.0
        cpu1 = inside[-1][1] if inside else cpu0
        return {
            "cpu_s": cpu1 - cpu0,
            "peak_rss_mb": max((s[2] for s in inside), default=0) / 2**20,
            "peak_rss_all_mb": max((s[2] for s in self.samples), default=0) / 2**20,
        }


def run_sampled(cmd: list[str], env: dict | None, timeout_s: float, log: Path) -> tuple[int, TreeSampler]:
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env=env, preexec_fn=pinned("client")
        )
        sampler = TreeSampler(proc.pid)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        finally:
            sampler.close()
    return proc.returncode, sampler


# -- llmreplay ------------------------------------------------------------------------------------
def run_llmreplay(
    shape: Shape, trace: Path, duration_s: float, workers: int, work: Path, prefix: str = ""
) -> dict:
    tag = f"{prefix}{shape.name}-{shape.rate_per_s:g}-llmreplay-{time.time_ns()}"
    truth_path = work / f"{tag}-truth.parquet"
    sim, url = start_sim(truth_path, work / f"{tag}-sim.log")
    run_dir = work / f"{tag}-run"
    try:
        cmd = [
            sys.executable, "-m", "llmreplay.cli", "replay", str(trace), "--target", url, "-o", str(run_dir),
            "--engine", "vllm", "--json", "--workers", str(workers), "--grace", "30",
        ]  # fmt: skip
        code, sampler = run_sampled(cmd, None, duration_s * 4 + 300, work / f"{tag}.log")
        if code not in (0, 1):
            raise RuntimeError(f"replay failed: {(work / f'{tag}.log').read_text()[-3000:]}")
    finally:
        stop(sim)
    run = json.loads((run_dir / "run.json").read_text())
    start = run["start_mono_ns"]
    truth = {r["request_id"]: r for r in pq.read_table(truth_path).to_pylist()}
    rows = [
        r for r in pq.read_table(run_dir / "results.parquet").to_pylist() if r["sent_offset_ns"] is not None
    ]
    samples = []
    for r in rows:
        t = truth[r["request_id"]]
        due = start + r["scheduled_offset_ns"] + r["session_wait_ns"]
        sent = start + r["sent_offset_ns"]
        first = None if r["ttft_ns"] is None or r["error_kind"] else sent + r["ttft_ns"]
        samples.append((due, t, r["dispatch_lag_ns"], first, r["chunk_offsets_ns"], r["error_kind"]))
    out = measure(shape, samples, sampler)
    out["sim_lateness_p99_ms"] = sim_lateness_p99_ms(truth_path)
    loop_cpu_s = sum(w.get("loop_cpu_s", 0.0) for w in run["workers"])
    out.update(
        tool="llmreplay",
        loop_cpu_s_per_1000=loop_cpu_s / max(1, out["sent"]) * 1000,
        worker_rss_mb=max((w.get("max_rss_mb", 0.0) for w in run["workers"]), default=0.0),
        coordinator_rss_mb=run.get("coordinator_max_rss_mb"),
        builder_rss_mb=(run.get("builder") or {}).get("peak_rss_mb"),
    )
    return out


def sim_lateness_p99_ms(truth_path: Path) -> float:
    """p99 of how late the sim's own engine steps ran: its event loop's share of any server-side lag."""
    steps = truth_path.with_name(f"{truth_path.stem}.steps.parquet")
    if not steps.exists():
        return float("nan")
    lateness = pq.read_table(steps, columns=["lateness_ns"]).column(0).to_numpy(zero_copy_only=False)
    return float(np.percentile(lateness, 99) / 1e6) if len(lateness) else float("nan")


def measure(shape: Shape, samples: list, sampler: TreeSampler) -> dict:
    """samples: (due_mono_ns, truth_row, own_lag_ns or None, client_first_token_mono_ns or None,
    client chunk offsets or None, error kind) per request that reached the server."""
    due = np.array([s[0] for s in samples], dtype=np.int64)
    arrival = np.array([s[1]["arrival_mono_ns"] for s in samples], dtype=np.int64)
    server_lag_ms = (arrival - due) / 1e6
    own = [s[2] for s in samples if s[2] is not None]
    own_lag_ms = np.array(own) / 1e6 if own else None
    ttft_err_ms, itl_err_ms = [], []
    for _, t, _, first, offsets, error in samples:
        if error is not None or first is None or t["first_token_mono_ns"] is None:
            continue
        ttft_err_ms.append((first - t["first_token_mono_ns"]) / 1e6)
        if offsets and len(offsets) > 1 and t["completion_tokens"] and t["completion_tokens"] > 1:
            client_gap = (offsets[-1] - offsets[0]) / (len(offsets) - 1)
            server_gap = (t["last_token_mono_ns"] - t["first_token_mono_ns"]) / (t["completion_tokens"] - 1)
            itl_err_ms.append(abs(client_gap - server_gap) / 1e6)
    arrivals_unix = [s[1]["arrival_unix_ns"] for s in samples]
    ends_unix = [
        s[1]["arrival_unix_ns"] + ((s[1]["last_token_mono_ns"] or s[1]["arrival_mono_ns"]) - s[1]["arrival_mono_ns"])
        for s in samples
    ]  # fmt: skip
    cost = sampler.window(min(arrivals_unix), max(ends_unix))
    span_s = (arrival.max() - arrival.min()) / 1e9 if len(arrival) > 1 else 0.0
    p = np.percentile
    return {
        "shape": shape.name,
        "sent": len(samples),
        "errors": sum(1 for s in samples if s[5] is not None),
        "target_rate": shape.rate_per_s,
        "achieved_rate": (len(samples) - 1) / span_s if span_s else 0.0,
        "lag_ms": (p(server_lag_ms, 50), p(server_lag_ms, 99), server_lag_ms.max()),
        "own_lag_ms": None
        if own_lag_ms is None
        else (p(own_lag_ms, 50), p(own_lag_ms, 99), own_lag_ms.max()),
        "ttft_err_ms": (p(ttft_err_ms, 50), p(ttft_err_ms, 99)) if ttft_err_ms else (np.nan, np.nan),
        "itl_err_ms": (p(itl_err_ms, 50), p(itl_err_ms, 99)) if itl_err_ms else (np.nan, np.nan),
        "tree_cpu_s_per_1000": cost["cpu_s"] / max(1, len(samples)) * 1000,
        "tree_rss_mb": cost["peak_rss_mb"],
        "tree_rss_all_mb": cost["peak_rss_all_mb"],
    }


# -- AIPerf -----------------------------------------------------------------------------------------
class AiperfUnavailable(Exception):
    pass


def base_python() -> str:
    """A CPython 3.12 for AIPerf's own venv: .venv's base interpreter, else pyenv's."""
    for candidate in (
        Path(sys.base_prefix) / "bin" / "python3.12",
        Path.home() / ".pyenv" / "versions" / "3.12.1" / "bin" / "python3.12",
    ):
        if candidate.exists():
            return str(candidate)
    raise AiperfUnavailable("no python3.12 found for AIPerf's virtual environment")


def ensure_aiperf() -> tuple[Path, dict]:
    """AIPerf's executable and environment; installs it into its own venv on first use."""
    aiperf = AIPERF_VENV / "bin" / "aiperf"
    if not aiperf.exists():
        print(f"# installing AIPerf into {AIPERF_VENV} (pip install aiperf) ...", flush=True)
        try:
            subprocess.run([base_python(), "-m", "venv", str(AIPERF_VENV)], check=True, capture_output=True)
            done = subprocess.run(
                [str(AIPERF_VENV / "bin" / "pip"), "install", "-q", "aiperf"], capture_output=True, text=True
            )
        except (OSError, subprocess.CalledProcessError) as exc:
            raise AiperfUnavailable(f"cannot create {AIPERF_VENV}: {exc}") from None
        if done.returncode != 0 or not aiperf.exists():
            raise AiperfUnavailable(f"pip install aiperf failed: {done.stderr.strip()[-300:]}")
    hf_home = AIPERF_VENV / "bench-hf-home"
    ensure_tokenizer(hf_home)
    env = {**os.environ, "HF_HOME": str(hf_home), "HF_HUB_OFFLINE": "1", "AIPERF_NO_COLOR": "1"}
    return aiperf, env


TOKENIZER_SCRIPT = r"""
import json, random, sys
from pathlib import Path
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
out = Path(sys.argv[1]); out.mkdir(parents=True, exist_ok=True)
rng = random.Random(0)
letters = "etaoinshrdlucmfwypvbgkjqxz"
words = ["".join(rng.choice(letters) for _ in range(rng.randint(2, 9))) for _ in range(6000)]
corpus = [" ".join(rng.choice(words) for _ in range(60)) for _ in range(3000)]
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
alphabet = pre_tokenizers.ByteLevel.alphabet()
trainer = trainers.BpeTrainer(vocab_size=8000, initial_alphabet=alphabet, special_tokens=["<|endoftext|>"])
tok.train_from_iterator(corpus, trainer)
tok.save(str(out / "tokenizer.json"))
config = {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|endoftext|>", "model_max_length": 10**6}
(out / "tokenizer_config.json").write_text(json.dumps(config))
"""


def ensure_tokenizer(hf_home: Path) -> None:
    """A byte-level BPE tokenizer laid out as a cached Hub repo: AIPerf insists on loading a tokenizer
    from the Hub and, offline, only finds cached repo ids (local paths fail in its worker pool)."""
    repo = hf_home / "hub" / ("models--" + AIPERF_TOKENIZER.replace("/", "--"))
    commit = "0" * 40
    snapshot = repo / "snapshots" / commit
    if (snapshot / "tokenizer.json").exists():
        return
    done = subprocess.run(
        [str(AIPERF_VENV / "bin" / "python"), "-c", TOKENIZER_SCRIPT, str(snapshot)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise AiperfUnavailable(f"cannot build a local tokenizer for AIPerf: {done.stderr.strip()[-300:]}")
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(commit)


def run_aiperf(shape: Shape, trace: Path, duration_s: float, work: Path) -> dict:
    aiperf, env = ensure_aiperf()
    tag = f"{shape.name}-{shape.rate_per_s:g}-aiperf-{time.time_ns()}"
    jsonl = work / f"{tag}.jsonl"
    exported = subprocess.run(
        [sys.executable, "-m", "llmreplay.cli", "export", "mooncake", str(trace), "-o", str(jsonl), "--force"],
        cwd=ROOT, capture_output=True, text=True,
    )  # fmt: skip
    if exported.returncode != 0:
        raise RuntimeError(f"export failed: {exported.stderr}")
    truth_path = work / f"{tag}-truth.parquet"
    sim, url = start_sim(truth_path, work / f"{tag}-sim.log")
    artifacts = work / f"{tag}-artifacts"
    try:
        cmd = [
            str(aiperf), "profile", "--model", "sim-model", "--url", url, "--endpoint-type", "chat",
            "--streaming", "--input-file", str(jsonl), "--custom-dataset-type", "mooncake_trace",
            "--fixed-schedule", "--fixed-schedule-auto-offset", "--tokenizer", AIPERF_TOKENIZER,
            "--ui-type", "none", "--export-level", "records", "--output-artifact-dir", str(artifacts),
            "--extra-inputs", "ignore_eos:true",
        ]  # fmt: skip
        code, sampler = run_sampled(cmd, env, duration_s * 4 + 600, work / f"{tag}.log")
    finally:
        stop(sim)
    records_path = artifacts / "profile_export.jsonl"
    if code != 0 or not records_path.exists():
        raise AiperfUnavailable(f"aiperf exited with {code}: {(work / f'{tag}.log').read_text()[-600:]}")
    offsets_ms = [json.loads(line)["timestamp"] for line in jsonl.read_text().splitlines()]
    offsets_ns = [round((t - offsets_ms[0]) * 1e6) for t in offsets_ms]
    truth = {r["request_id"]: r for r in pq.read_table(truth_path).to_pylist()}
    joined = []
    for line in records_path.read_text().splitlines():
        record = json.loads(line)
        meta, metrics = record["metadata"], record.get("metrics") or {}
        t = truth.get(meta.get("x_request_id"))
        if t is None:
            continue
        joined.append((offsets_ns[meta["session_num"]], t, meta, metrics, record.get("error")))
    if not joined:
        raise AiperfUnavailable("no AIPerf record matched a request the sim saw (x_request_id)")
    # AIPerf's schedule origin is not on our clock: anchor it so its best-dispatched request has lag 0.
    # That flatters AIPerf by its smallest lag; llmreplay's figures use the true origin.
    anchor = min(t["arrival_mono_ns"] - off for off, t, *_ in joined)
    samples = []
    for off, t, meta, metrics, error in joined:
        first = None
        ttft = metrics.get("time_to_first_token")
        if ttft is not None and error is None:
            # request_start_ns is AIPerf's wall clock; map it onto the sim's monotonic clock
            first_unix = meta["request_start_ns"] + ttft["value"] * 1e6
            first = t["arrival_mono_ns"] + (first_unix - t["arrival_unix_ns"])
        gaps = (metrics.get("inter_chunk_latency") or {}).get("value")
        offsets = None
        if gaps and first is not None:
            offsets = list(np.cumsum([0.0, *[g * 1e6 for g in gaps]]))
        samples.append((anchor + off, t, None, first, offsets, None if error is None else "error"))
    out = measure(shape, samples, sampler)
    out["sim_lateness_p99_ms"] = sim_lateness_p99_ms(truth_path)
    out.update(tool="aiperf", loop_cpu_s_per_1000=None, worker_rss_mb=None, coordinator_rss_mb=None)
    return out


# -- report ---------------------------------------------------------------------------------------
def fmt(values, digits=2) -> str:
    if values is None:
        return "-"
    return " / ".join(f"{v:.{digits}f}" for v in values)


def print_table(results: list[dict]) -> None:
    print(
        "| tool | shape | sent | err | rate target/achieved | lag p50/p99/max ms (server) | own lag p50/p99/max ms "
        "| TTFT err p50/p99 ms | ITL err p50/p99 ms | loop CPU-s/1k | client CPU-s/1k (all procs, run window) "
        "| peak RSS MB in run (all procs) | RSS MB worker / coordinator / builder | sim step lateness p99 ms |"
    )
    print("|---|---|---:|---:|---|---|---|---|---|---:|---:|---:|---|---:|")
    for r in results:
        loop = "-" if r["loop_cpu_s_per_1000"] is None else f"{r['loop_cpu_s_per_1000']:.2f}"
        parts = "-"
        if r["tool"] == "llmreplay":
            parts = f"{r['worker_rss_mb']:.0f} / {r['coordinator_rss_mb']:.0f} / {r['builder_rss_mb']:.0f}"
        print(
            f"| {r['tool']} | {r['shape']} | {r['sent']} | {r['errors']} "
            f"| {r['target_rate']:.0f} / {r['achieved_rate']:.1f} | {fmt(r['lag_ms'])} | {fmt(r['own_lag_ms'])} "
            f"| {fmt(r['ttft_err_ms'])} | {fmt(r['itl_err_ms'], 3)} | {loop} | {r['tree_cpu_s_per_1000']:.2f} "
            f"| {r['tree_rss_mb']:.0f} (all life {r['tree_rss_all_mb']:.0f}) | {parts} "
            f"| {r['sim_lateness_p99_ms']:.2f} |"
        )


def verdicts(results: list[dict]) -> None:
    for r in (r for r in results if r["tool"] == "llmreplay"):
        lag_p99, ttft_p99 = r["lag_ms"][1], r["ttft_err_ms"][1]
        own_gap = abs(lag_p99 - r["own_lag_ms"][1])
        print(
            f"# llmreplay {r['shape']}: lag p99 {lag_p99:.2f} ms, TTFT err p99 {ttft_p99:.2f} ms, "
            f"own lag p99 within {own_gap:.2f} ms of the server's ({'ok' if own_gap <= 1 else 'NOT within 1 ms'}), "
            f"loop {r['loop_cpu_s_per_1000']:.2f} CPU-s/1k, in-run RSS {r['tree_rss_mb']:.0f} MB"
        )


def sweep(rates: list[float], duration_s: float, workers: int, work: Path, shape_name: str) -> None:
    base = SHAPES[shape_name]
    best = None
    for rate in rates:
        shape = Shape(shape_name, rate, duration_s, base.input_median_tokens, base.output_median_tokens, "")
        trace = work / f"sweep-{rate:g}.parquet"
        count = make_trace(shape, duration_s, trace)
        r = run_llmreplay(shape, trace, duration_s, workers, work, prefix="sweep-")
        held = r["sent"] == count  # every request of the trace reached the server
        ok = held and r["lag_ms"][1] <= LAG_BOUND_MS and r["ttft_err_ms"][1] <= TTFT_ERR_BOUND_MS
        print(
            f"# sweep {rate:g} req/s: achieved {r['achieved_rate']:.1f}, lag p99 {r['lag_ms'][1]:.2f} ms, "
            f"TTFT err p99 {r['ttft_err_ms'][1]:.2f} ms -> {'holds' if ok else 'breaks'}",
            flush=True,
        )
        if not ok:
            break
        best = rate
    print(f"# highest {shape_name} rate with lag p99 <= {LAG_BOUND_MS} ms and TTFT err p99 <= "
          f"{TTFT_ERR_BOUND_MS} ms: {best if best is not None else 'none of ' + str(rates)}")  # fmt: skip


def memory_scaling(sizes: list[int], work: Path, send_speed: float | None = None) -> None:
    """Peak RSS of the replay's processes against the trace's size. Long-stream shape (~500-token
    prompts). By default `--duration 2` keeps each run short: planning, building and loading cover
    the whole trace either way. With `send_speed`, the whole trace is sent at that `--speed`, so
    the results the worker spools and the coordinator merges are measured too."""
    base = SHAPES["long"]
    rows = []
    for size in sizes:
        shape = Shape("long", base.rate_per_s, size / base.rate_per_s, base.input_median_tokens,
                      base.output_median_tokens, "")  # fmt: skip
        trace = work / f"memory-{size}.parquet"
        count = make_trace(shape, shape.duration_s, trace)
        sim, url = start_sim(work / f"memory-{size}-truth.parquet", work / f"memory-{size}-sim.log")
        run_dir = work / f"memory-{size}-run"
        try:
            cmd = [
                sys.executable, "-m", "llmreplay.cli", "replay", str(trace), "--target", url, "-o",
                str(run_dir), "--engine", "vllm", "--json", "--grace", "10",
            ]  # fmt: skip
            cmd += ["--speed", str(send_speed)] if send_speed else ["--duration", "2"]
            code, sampler = run_sampled(cmd, None, 3600, work / f"memory-{size}.log")
            if code not in (0, 1):
                raise RuntimeError(f"replay failed: {(work / f'memory-{size}.log').read_text()[-3000:]}")
        finally:
            stop(sim)
        run = json.loads((run_dir / "run.json").read_text())
        worker = max((w.get("max_rss_mb", 0.0) for w in run["workers"]), default=0.0)
        builder = (run.get("builder") or {}).get("peak_rss_mb") or 0.0
        coordinator = run.get("coordinator_max_rss_mb") or 0.0
        rows.append((count, builder, coordinator, worker))
        print(f"# memory {count} requests ({run['counts']['sent']} sent): peak RSS builder {builder:.0f} MB, "
              f"coordinator {coordinator:.0f} MB, worker {worker:.0f} MB", flush=True)  # fmt: skip
    if len(rows) > 1:
        (n0, *r0), (n1, *r1) = rows[0], rows[-1]
        per_k = [(b - a) / (n1 - n0) * 1000 for a, b in zip(r0, r1, strict=True)]
        print(f"# memory per 1,000 requests (slope {n0}..{n1}): builder {per_k[0]:.1f} MB, "
              f"coordinator {per_k[1]:.1f} MB, worker {per_k[2]:.1f} MB")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10 s per shape instead of the full durations")
    parser.add_argument("--shapes", default="light,long,short")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--duration-s", type=float, help="override every shape's duration")
    parser.add_argument("--no-aiperf", action="store_true", help="llmreplay only")
    parser.add_argument(
        "--repeat", type=int, default=1, help="run every shape N times (report medians yourself)"
    )
    parser.add_argument("--sweep", help="comma-separated rates to try, lowest first")
    parser.add_argument("--sweep-shape", default="short", choices=sorted(SHAPES))
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument("--memory", help="comma-separated trace sizes (requests): peak RSS against size")
    parser.add_argument(
        "--memory-send-speed",
        type=float,
        help="with --memory: send the whole trace at this --speed (measures results too), not 2 s of it",
    )
    parser.add_argument(
        "--pin", action="store_true", help="sim on the last CPU, the client (either tool) on the others"
    )
    parser.add_argument(
        "--rt",
        action="store_true",
        help="run sim and client SCHED_FIFO (needs root): measures them, not the other jobs on the machine",
    )
    args = parser.parse_args()
    REALTIME["on"] = args.rt
    if args.pin:
        cpus = sorted(os.sched_getaffinity(0))
        if len(cpus) < 2:
            parser.error("--pin needs at least 2 CPUs")
        PINNING.update(sim={cpus[-1]}, client=set(cpus[:-1]))
    work = Path(tempfile.mkdtemp(prefix="bench_replay-"))
    print(
        f"# bench_replay: {os.cpu_count()} cpus, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}, "
        f"workers {args.workers}, pinning {PINNING or 'none'}, SCHED_FIFO {args.rt}, work dir {work}",
        flush=True,
    )
    results = []
    aiperf_note = None if not args.no_aiperf else "skipped (--no-aiperf)"
    for name in args.shapes.split(","):
        shape = SHAPES[name]
        duration = args.duration_s or (10.0 if args.quick else shape.duration_s)
        for _ in range(args.repeat):
            print(f"# {shape.name}: {shape.description}, {duration:.0f} s", flush=True)
            trace = work / f"{shape.name}.parquet"
            make_trace(shape, duration, trace)
            results.append(run_llmreplay(shape, trace, duration, args.workers, work))
            if aiperf_note is None:
                try:
                    results.append(run_aiperf(shape, trace, duration, work))
                except AiperfUnavailable as exc:
                    aiperf_note = f"AIPerf NOT MEASURED: {exc}"
                    print(f"# {aiperf_note}; carrying on with llmreplay only", flush=True)
    print(f"# load average at the end {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print_table(results)
    verdicts(results)
    if aiperf_note:
        print(f"# {aiperf_note}")
    if args.memory:
        memory_scaling([int(n) for n in args.memory.split(",")], work, args.memory_send_speed)
    if args.sweep:
        rates = [float(r) for r in args.sweep.split(",")]
        sweep(rates, args.duration_s or 10.0, args.workers, work, args.sweep_shape)
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
