"""One replay on several "hosts" (separate replay processes on this machine, each its own shard), started
together by `llmreplay barrier`, merged raw: the rows, the sessions and the server's arrival times as one
host would have them, plus the measured clock bound; a skewed host clock is caught."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pyarrow.parquet as pq
import pytest
from replay_helpers import ROOT, content_record, replay_cmd, results, run_info, write_content_trace

from benchmarks._support import free_port
from llmreplay.tokenizers import load_tokenizer
from replayer.results.summary import summarize_file

pytestmark = pytest.mark.e2e

SESSIONS, TURNS = 24, 3
MEDIAN_LAG_MS = 3.0  # as tests/e2e/replay/test_timing.py: a loaded 2-core machine
MAX_LAG_MS = 30.0
# Four replay processes, a sim and a barrier share two cores with the rest of the suite: the run's own lag
# gate is loosened; the server-side arrival bounds below are the test.
LOOSE_LAG = ("--max-dispatch-lag", "50ms")
TOKENIZER = load_tokenizer()  # the sim's default (mistral-tekken)


def session_trace(path):
    """SESSIONS sessions of TURNS turns, spread over ~3 s, think times of 200 ms."""
    records, i = [], 0
    rng = np.random.default_rng(5)
    for s in range(SESSIONS):
        at = float(rng.uniform(0, 3000))
        for turn in range(TURNS):
            records.append(
                content_record(
                    i, at, session_id=f"s{s}", turn_index=turn, think_time_ns=200_000_000 if turn else None,
                    prompt_tokens=len(TOKENIZER.encode(f"question number {i}")),  # as the sim counts it
                    completion_tokens=int(rng.integers(3, 12)),
                )
            )  # fmt: skip
            i += 1
            at += 400.0
    return write_content_trace(path, sorted(records, key=lambda r: r.arrival_time))


def start_barrier(processes, shards: int) -> str:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "llmreplay.cli", "barrier", "--shards", str(shards), "--port", str(port),
           "--lead", "1s", "--timeout", "2m"]  # fmt: skip
    processes.start(cmd, "barrier", ready_url=f"{url}/time")
    return url


def replay_shards(processes, trace, url, barrier, out, shards, skew_ns=None):
    import subprocess

    procs = []
    for k in range(shards):
        cmd = replay_cmd(
            trace, url, out / f"shard-{k}", "--shard", f"{k}/{shards}", "--start-barrier", barrier, *LOOSE_LAG
        )
        env = None
        if skew_ns is not None and k == shards - 1:  # the last host's clock is off
            import os

            env = {**os.environ, "LLMREPLAY_TEST_CLOCK_SKEW_NS": str(skew_ns)}
        procs.append(
            subprocess.Popen(
                cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
        )
    done = []
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=120)
        done.append((proc.returncode, stderr))
    return done


def merge(runs, out, *extra):
    import subprocess

    cmd = [sys.executable, "-m", "llmreplay.cli", "merge", *map(str, runs), "-o", str(out), *extra]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=60)


def server_lag_ms(run_dir, truth) -> np.ndarray:
    """Server arrival (wall clock) minus the merged schedule's due time, per request."""
    base = run_info(run_dir)["start_unix_ns"]
    rows = [r for r in results(run_dir) if r["sent_offset_ns"] is not None]
    return (
        np.array([truth[r["request_id"]]["arrival_unix_ns"] - base - r["scheduled_offset_ns"] for r in rows])
        / 1e6
    )


@pytest.mark.parametrize("shards", [2, 4])
def test_shards_merged_are_the_whole_trace_on_time(tmp_path, processes, sim_with_truth, shards):
    trace = session_trace(tmp_path / "t.parquet")
    url, truth = sim_with_truth("--profile", "fast")
    barrier = start_barrier(processes, shards)
    done = replay_shards(processes, trace, url, barrier, tmp_path, shards)
    assert all(code == 0 for code, _ in done), done
    runs = [tmp_path / f"shard-{k}" for k in range(shards)]
    merged = merge(runs, tmp_path / "merged")
    assert merged.returncode == 0, merged.stderr + merged.stdout
    rows = results(tmp_path / "merged")
    assert sorted(r["source_request_id"] for r in rows) == sorted(f"r{i}" for i in range(SESSIONS * TURNS))
    owner = {}
    for r in rows:  # a session never spans hosts
        assert owner.setdefault(r["session_id"], r["shard"]) == r["shard"]
    assert {r["shard"] for r in rows} == set(range(shards))
    info = run_info(tmp_path / "merged")
    bound_ms = info["clock"]["cross_host_bound_ns"] / 1e6
    assert info["clock"]["within_budget"] and len(info["clock"]["hosts"]) == shards
    assert all(w["timer_slack_ns"] == 1 for w in info["workers"])  # each pacing thread's slack at its minimum
    lag = server_lag_ms(tmp_path / "merged", truth())
    assert np.all(lag > -0.5 - bound_ms), "a request reached the server before its time"
    assert np.median(lag) < MEDIAN_LAG_MS + bound_ms and np.max(lag) < MAX_LAG_MS + bound_ms
    # raw merge: the merged statistics are the ones recomputed from all rows, not a mix of the shards'
    assert (
        info["summary"]["latency_ms"] == summarize_file(tmp_path / "merged" / "results.parquet")["latency_ms"]
    )


def test_a_skewed_host_clock_is_measured_and_flagged(tmp_path, processes, start_sim):
    trace = session_trace(tmp_path / "t.parquet")
    url = start_sim("--profile", "fast")
    barrier = start_barrier(processes, 2)
    done = replay_shards(processes, trace, url, barrier, tmp_path, 2, skew_ns=40_000_000)  # 40 ms off
    assert all(code == 0 for code, _ in done), done
    merged = merge([tmp_path / "shard-0", tmp_path / "shard-1"], tmp_path / "merged", "--clock-budget", "5ms")
    assert merged.returncode == 1 and "OVER BUDGET" in merged.stdout
    clock = run_info(tmp_path / "merged")["clock"]
    skewed = clock["hosts"][1]
    assert all(35e6 < offset < 45e6 for offset in skewed["offset_ns"])  # measured at arm and at end
    assert clock["cross_host_bound_ns"] > 35e6 and not clock["within_budget"]


def test_merge_refuses_what_is_not_one_replays_shards(tmp_path, shared_sim):
    trace = session_trace(tmp_path / "t.parquet")
    plain = tmp_path / "plain"
    from replay_helpers import run_replay

    assert run_replay(trace, shared_sim, plain).returncode == 0
    refused = merge([plain], tmp_path / "m")
    assert refused.returncode == 2 and "ran without --shard" in refused.stderr
    shard = tmp_path / "s0"
    assert run_replay(trace, shared_sim, shard, "--shard", "0/2").returncode == 0
    missing = merge([shard], tmp_path / "m2")
    assert missing.returncode == 2 and "shards 1 of 2 are missing" in missing.stderr
    partial = merge([shard], tmp_path / "m3", "--allow-missing-shards")
    assert partial.returncode == 1  # incomplete: the verdict fails
    assert json.loads((tmp_path / "m3" / "run.json").read_text())["stop_reason"] == "incomplete"
    assert pq.read_table(tmp_path / "m3" / "results.parquet").num_rows == len(results(shard))
    again = merge([shard], tmp_path / "m3", "--allow-missing-shards")  # one run a directory, as replay
    assert again.returncode == 2 and "already holds a run" in again.stderr and "Traceback" not in again.stderr
    ray = subprocess.run(
        [sys.executable, "-m", "llmreplay.cli", "replay", str(trace), "--target", shared_sim, "--ray", "auto",
         "-o", str(tmp_path / "r")],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert (
        ray.returncode == 2
        and "--ray: needs --shards N" in ray.stderr
        and not (tmp_path / "r" / "shards").exists()
    )


def test_start_at_starts_every_shard_at_the_given_instant(tmp_path, shared_sim):
    import time

    trace = session_trace(tmp_path / "t.parquet")
    start = f"{time.time() + 6:.3f}"  # time for both processes to load, build and connect
    jobs = [
        (
            trace,
            shared_sim,
            tmp_path / f"shard-{k}",
            "--shard",
            f"{k}/2",
            "--start-at",
            start,
            *LOOSE_LAG,
        )
        for k in range(2)
    ]
    from replay_helpers import run_replays_concurrently

    done = run_replays_concurrently(jobs)
    assert all(d.returncode == 0 for d in done), [d.stderr for d in done]
    starts = [run_info(tmp_path / f"shard-{k}")["start_unix_ns"] for k in range(2)]
    assert starts == [round(float(start) * 1e9)] * 2
    merged = merge([tmp_path / "shard-0", tmp_path / "shard-1"], tmp_path / "merged")
    clock = run_info(tmp_path / "merged")["clock"]
    if clock["hosts"][0]["kernel"]["synchronized"]:  # a time daemon: the kernel's bound stands in
        assert clock["cross_host_bound_ns"] is not None
    else:  # nothing measured the clocks: said, and the merge is flagged
        assert merged.returncode == 1 and "unknown" in clock["note"] and not clock["within_budget"]
