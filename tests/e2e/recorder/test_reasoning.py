"""Reasoning traffic measured alike end to end: recorded through `llmreplay record` in front of a
reasoning sim, replayed against the same sim and one that reasons twice as long, then compared.

TTFT and TTFO are checked against each sim's ground truth on both sides; `compare` must find no
TTFT/TTFO regression against the same sim, and a TTFO regression plus the moved reasoning share
against the sim that thinks twice as long (the forced length keeps the output the same).
"""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from replay_helpers import results, run_replay

from llmreplay.trace_io import read_trace
from recorder.keys import keyed_hash, load_or_create_key
from tests.e2e.recorder.test_recorder import client, start_recorder, stop

pytestmark = pytest.mark.e2e  # every test here starts processes

ROOT = Path(__file__).resolve().parents[3]
REQUESTS = 24
OUTPUT_TOKENS = 24  # forced (ignore_eos): reasoning plus answer
REASONING_TOKENS = 8
# 100 ms before the engine takes a request and 20 ms steps: TTFT ~120 ms, TTFO ~280 ms, so a few ms of
# proxy, client and shared-box noise stay well inside compare's 10% tolerance
SIM_FLAGS = ("--profile", "fast", "--decode-base-ms", "20", "--slow-first-token-ms", "100")


def test_reasoning_is_measured_alike_recorded_replayed_and_compared(processes, start_sim, tmp_path):
    truth = {name: tmp_path / f"truth-{name}.parquet" for name in ("recorded", "same", "twice")}
    reasoning = ("--reasoning-field", "reasoning_content", "--reasoning-tokens")
    recorded_sim = start_sim(*SIM_FLAGS, *reasoning, str(REASONING_TOKENS), "--log", str(truth["recorded"]))
    trace_dir = tmp_path / "trace"
    proxy, recorder = start_recorder(processes, tmp_path, recorded_sim, trace_dir)
    _send_chats(proxy)
    stop(recorder)
    trace = read_trace(trace_dir).table.to_pylist()
    assert len(trace) == REQUESTS and all(row["error_kind"] is None for row in trace)
    assert {(row["completion_tokens"], row["reasoning_tokens"]) for row in trace} == {
        (OUTPUT_TOKENS, REASONING_TOKENS)
    }

    same_sim = start_sim(*SIM_FLAGS, *reasoning, str(REASONING_TOKENS), "--log", str(truth["same"]))
    twice_sim = start_sim(*SIM_FLAGS, *reasoning, str(2 * REASONING_TOKENS), "--log", str(truth["twice"]))
    runs = {}
    for name, url in (("same", same_sim), ("twice", twice_sim)):
        runs[name] = tmp_path / f"run-{name}"
        done = run_replay(trace_dir, url, runs[name], "--engine", "vllm", "--max-dispatch-lag", "1s")
        assert done.returncode in (0, 1), done.stderr[-2000:]
        rows = results(runs[name])
        reasoned = 2 * REASONING_TOKENS if name == "twice" else REASONING_TOKENS
        assert {(r["completion_tokens"], r["reasoning_tokens"]) for r in rows} == {(OUTPUT_TOKENS, reasoned)}

    processes.stop_all()  # the sims publish their ground truth when they stop
    _check_first_tokens(trace, truth["recorded"], "user_id", _names_by_user(tmp_path))
    for name, run in runs.items():
        _check_first_tokens(results(run), truth[name], "request_id", None)

    same = _compare(trace_dir, runs["same"])
    assert same["exit_code"] == 0, same["verdict"]["headline"]
    assert "reasoning share" not in same["verdict"]["headline"]
    twice = _compare(trace_dir, runs["twice"])
    assert twice["exit_code"] == 1
    cells = twice["latency"]
    assert cells["ttfo"]["comparison"]["p50"]["verdict"] == "regression"
    p90 = cells["ttfo"]["comparison"]["p90"]  # 24 requests: too few beyond p90 to call a change
    assert p90["few_samples"] and p90["verdict"] == "inconclusive" and p90["ci_low"] > 1.0
    assert "regression" not in {cell["verdict"] for cell in cells["ttft"]["comparison"].values()}
    assert "reasoning share of output 33% -> 67%" in twice["verdict"]["headline"]


def _send_chats(proxy: str) -> None:
    """REQUESTS streamed chats, 12 at a time, each answer forced to OUTPUT_TOKENS tokens."""
    cli = client(proxy)

    def chat(i: int) -> None:
        stream = cli.chat.completions.create(
            model="sim-model",
            messages=[{"role": "user", "content": f"Question {i}: why is the sky blue?"}],
            user=f"req-{i}",
            extra_headers={"X-Request-Id": f"req-{i}"},
            extra_body={"ignore_eos": True},
            max_tokens=OUTPUT_TOKENS,
            stream=True,
            stream_options={"include_usage": True},
        )
        for _ in stream:
            pass

    with ThreadPoolExecutor(12) as pool:
        list(pool.map(chat, range(REQUESTS)))


def _names_by_user(tmp_path: Path) -> dict:
    """The recorder keys user ids: the trace's user_id -> the X-Request-Id the sim logged."""
    key = load_or_create_key(tmp_path / "recorder.key")  # start_recorder's key file
    return {keyed_hash(key, f"req-{i}", "u"): f"req-{i}" for i in range(REQUESTS)}


def _check_first_tokens(rows: list[dict], truth_path: Path, key: str, names: dict | None) -> None:
    """Each side's TTFT is the sim's first (reasoning) token and its TTFO the first answer token, as the
    sim stamped them, plus only what lies between (proxy or client, a few ms; loose bounds: shared box)."""
    truth = {r["request_id"]: r for r in pq.read_table(truth_path).to_pylist()}
    for row in rows:
        real = truth[names[row[key]] if names else row[key]]
        for column, stamp in (("ttft_ns", "first_token_mono_ns"), ("ttfo_ns", "first_answer_mono_ns")):
            excess = row[column] - (real[stamp] - real["arrival_mono_ns"])
            assert -1_000_000 <= excess <= 100_000_000, (column, excess)
        assert row["ttfo_ns"] - row["ttft_ns"] == row["reasoning_ns"] > 0


def _compare(baseline: Path, candidate: Path) -> dict:
    done = subprocess.run(
        [sys.executable, "-m", "llmreplay.cli", "compare", str(baseline), str(candidate), "--json"]
        + ["--max-dispatch-lag", "1s"],  # the shared box, not the replayer: fidelity is not the question
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode in (0, 1), done.stderr[-2000:]
    result = json.loads(done.stdout)
    return {**result, "exit_code": done.returncode}
