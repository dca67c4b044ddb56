"""The whole path of issue #14 against each real engine: `llmreplay record --content` in front of it,
driven by the openai SDK (streamed, plain, tools with tool_choice "required", response_format
json_schema) -> `llmreplay anonymize --verify` -> `llmreplay replay` of the anonymized trace (no
engine or tokenizer flag) -> `llmreplay compare` of the recording with the replay.

The anonymized text is spelled in the recorder's default tokenizer, not the engine's: the replay counts
it on the engine before the clock, and `--fit-lengths` respells it so the engine counts what it counted.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

import openai
import pyarrow.parquet as pq
import pytest
from engine_client import MAX_DISPATCH_LAG, record_figure
from live_processes import ProcessPool, free_port, llmreplay_cmd

pytestmark = [pytest.mark.engines, pytest.mark.timeout(600)]

ROUNDS = 4  # each: one request of every kind
KINDS = ("stream", "plain", "tools", "json_schema")
# Over two 512-token prefix blocks, so the trace shares whole blocks between requests.
SYSTEM = {"role": "system", "content": "You are a careful assistant for a travel agency in Lisbon. " * 110}
# Enums keep the random-weight model's tool arguments and JSON short: the grammar ends them.
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather for a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string", "enum": ["Paris", "Rome"]}},
                "required": ["city"],
                "additionalProperties": False,
            },
        },
    }
]
SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["name", "age"],
    "properties": {
        "name": {"type": "string", "enum": ["Ada", "Alan"]},
        "age": {"type": "integer", "enum": [30, 40]},
    },
}
# vLLM's grammar for tool_choice "required" ends a call in 31-39 tokens of the random-weight model, mostly.
TOOL_MAX_TOKENS = 128
# The recording and the replay run seconds apart on two shared cores with 4 streamed requests: their
# latencies move by 2x from contention alone. What this gate judges is fidelity and errors; only a change
# beyond 2x counts.
COMPARE_TOLERANCE = "99%"
# llama.cpp 0c1e570 answers a json_schema request whose length is forced (ignore_eos + n_predict beyond
# the grammar's end) with this HTTP 500.


def drive(base_url: str) -> None:
    """What an application sends: no length-forcing fields, usage asked for in the stream."""
    cli = openai.OpenAI(base_url=f"{base_url}/v1", api_key="sk-engine-test", max_retries=0, timeout=300)
    for i in range(ROUNDS):
        trip = [SYSTEM, {"role": "user", "content": f"Question {i}: plan {i + 2} days in Lisbon."}]
        for _ in cli.chat.completions.create(
            model="tiny", messages=trip, max_tokens=24, stream=True, stream_options={"include_usage": True}
        ):
            pass
        cli.chat.completions.create(model="tiny", messages=trip, max_tokens=16)
        cli.chat.completions.create(
            model="tiny",
            max_tokens=TOOL_MAX_TOKENS,
            tools=TOOLS,
            tool_choice="required",
            messages=[SYSTEM, {"role": "user", "content": f"Weather in Paris, day {i}?"}],
        )
        cli.chat.completions.create(
            model="tiny",
            max_tokens=60,
            messages=[{"role": "user", "content": f"Person {i}."}],
            response_format={"type": "json_schema", "json_schema": {"name": "person", "schema": SCHEMA}},
        )


def run_cli(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(llmreplay_cmd(*args), cwd=cwd, capture_output=True, text=True, timeout=timeout)


@dataclass
class Path14:
    engine: str
    recording: Path
    anonymized: Path
    run_dir: Path
    recorded: list[dict]  # the recording's rows, in arrival order
    replayed: list[dict]  # results.parquet's rows
    replay_out: str
    compare: subprocess.CompletedProcess


def kind(row: dict) -> str:
    """Which of KINDS a trace or results row is, from its own columns."""
    if row["tools_count"]:
        return "tools"
    if row["structured_output"] == "json_schema":
        return "json_schema"
    return "stream" if row["stream"] else "plain"


@pytest.fixture(scope="module")
def path14(engine, tmp_path_factory) -> Path14:
    folder = tmp_path_factory.mktemp(f"path14-{engine.name}")
    pool = ProcessPool(folder)
    port = free_port()
    cmd = llmreplay_cmd(
        "record",
        "--upstream",
        engine.base_url,
        "--listen",
        f"127.0.0.1:{port}",
        "-o",
        str(folder / "recorded"),
        "--content",
        "--key-file",
        str(folder / "recorder.key"),
        "--confdir",
        str(folder / "mitmproxy"),
        "--stats-interval",
        "1s",
    )
    try:
        pool.start(cmd, "recorder", ready_url=f"http://127.0.0.1:{port}/health")
        drive(f"http://127.0.0.1:{port}")
    finally:
        pool.stop_all()  # SIGTERM: the recorder drains and files every journaled request
    [recording] = sorted((folder / "recorded").glob("*.parquet"))
    anonymized = folder / "anonymized.parquet"
    done = run_cli(
        "anonymize",
        str(recording),
        "-o",
        str(anonymized),
        "--key-file",
        str(folder / "anon.key"),
        "--verify",
        "--quiet",
        cwd=folder,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    run_dir = folder / "run"
    replay = run_cli(
        "replay",
        str(anonymized),
        "--target",
        engine.base_url,
        "-o",
        str(run_dir),
        "--fit-lengths",
        "--max-dispatch-lag",
        MAX_DISPATCH_LAG,
        "--quiet",
        cwd=folder,
    )
    if not (run_dir / "results.parquet").is_file():
        pytest.fail(
            f"replay wrote no results (exit {replay.returncode}):\n{replay.stderr[-3000:]}", pytrace=False
        )
    compare = run_cli(
        "compare",
        str(anonymized),
        str(run_dir),
        "--tolerance",
        COMPARE_TOLERANCE,
        "--max-dispatch-lag",
        MAX_DISPATCH_LAG,
        # --fit-lengths respells the default tokenizer's text from its shape, so the prefixes it shared
        # come back in Tekken's units: the cache check rightly tells (it is the A/A test's subject), so
        # it is off here (100%); test_engine_aa.py holds it to 2 points
        "--max-cached-share-difference",
        "100%",
        "--json",
        cwd=folder,
    )
    recorded = sorted(pq.read_table(recording).to_pylist(), key=lambda r: r["arrival_time"])
    return Path14(
        engine.name,
        recording,
        anonymized,
        run_dir,
        recorded,
        pq.read_table(run_dir / "results.parquet").to_pylist(),
        replay.stdout + replay.stderr,
        compare,
    )


def test_the_recording_holds_every_request_as_the_engine_answered(path14):
    rows = path14.recorded
    assert len(rows) == ROUNDS * len(KINDS) and all(r["http_status"] == 200 for r in rows), rows
    assert {r["token_source"] for r in rows} == {"server_usage"}
    assert [kind(r) for r in rows] == list(KINDS) * ROUNDS, [kind(r) for r in rows]
    tools = [r for r in rows if kind(r) == "tools"]
    calls = [r["tool_calls_count"] for r in tools]
    record_figure(path14.engine, "recorded_tool_choice_required_tool_calls", calls)
    assert all(r["tool_choice"] == "required" and r["tools_count"] == 1 for r in tools), tools
    if path14.engine == "vllm":
        # required is enforced by a grammar: a call, unless the random weights wander past max_tokens first
        assert any(calls), tools
        assert all(r["tool_calls_count"] or r["finish_reason"] == "length" for r in tools), tools
    else:
        # llama-server accepts tool_choice "required" but, with random weights, answers with plain text.
        assert all(r["finish_reason"] == "length" for r in tools), [r["finish_reason"] for r in tools]


def test_every_replayed_request_succeeds(path14):
    bad = [
        (kind(r), r["http_status"], (r["error_detail"] or "")[:120])
        for r in path14.replayed
        if r["http_status"] != 200 or r["error_kind"] is not None
    ]
    record_figure(path14.engine, "path14_failed", [f"{kind}: HTTP {status}" for kind, status, _ in bad])
    assert len(path14.replayed) == len(path14.recorded) and not bad, bad


def test_replayed_lengths_equal_the_recording(path14):
    ok = [r for r in path14.replayed if r["http_status"] == 200]
    off = [
        (
            kind(r),
            r["recorded_prompt_tokens"],
            r["prompt_tokens"],
            r["recorded_completion_tokens"],
            r["completion_tokens"],
        )
        for r in ok
        if (r["prompt_tokens"], r["completion_tokens"])
        != (r["recorded_prompt_tokens"], r["recorded_completion_tokens"])
    ]
    record_figure(path14.engine, "path14_lengths_exact", f"{len(ok) - len(off)}/{len(ok)}")
    if path14.engine == "llama.cpp":
        # llama.cpp cannot force a length under a grammar (llmreplay/engines.py forces_length_under_grammar):
        # json_schema and tool_choice-required answers end where the grammar does, never later; the rest exact.
        grammar = ("json_schema", "tools")
        ok_lengths = [o for o in off if o[0] not in grammar]
        shorter = [o for o in off if o[0] in grammar and o[4] <= o[3] and o[1] == o[2]]
        assert not ok_lengths and len(shorter) == len(off), off
        return
    assert len(ok) >= 3 * ROUNDS and not off, off


def test_the_engine_caches_the_prefixes_the_recording_shared(path14):
    """The recorded requests after the first share its system prompt (two 512-token blocks and more):
    their replays find it cached. llama.cpp's cache is per slot: a request finds it only on a slot that holds it."""
    first = min(r["arrival_time"] for r in path14.replayed)
    later = [
        r
        for r in path14.replayed
        if r["http_status"] == 200 and kind(r) != "json_schema" and r["arrival_time"] > first
    ]
    cached = [r["cached_tokens"] or 0 for r in sorted(later, key=lambda r: r["arrival_time"])]
    record_figure(path14.engine, "path14_cached_tokens", cached)
    hits = sum(c >= 1024 for c in cached)
    assert hits >= (len(later) - 2 if path14.engine == "vllm" else len(later) // 2), cached


def test_compare_with_the_recording(path14):
    """Faithful, and no failure but latency: vLLM's errors pass; llama.cpp's fail on the grammar 500s only.
    Latency is shown, not asserted: the two sides ran on two cores other work shares (see COMPARE_TOLERANCE)."""
    assert path14.compare.returncode in (0, 1), path14.compare.stdout[-2000:] + path14.compare.stderr[-2000:]
    verdict = json.loads(path14.compare.stdout)["verdict"]
    record_figure(path14.engine, "path14_compare", f"exit {verdict['exit_code']}: {verdict['headline']}")
    if path14.engine == "vllm":
        assert verdict["headline"].endswith("replay faithful"), verdict
    others = [r for r in verdict["reasons"] if " regressed at " not in r]
    if path14.engine == "vllm":
        assert not others, verdict
    else:  # json_schema answers end at the grammar's end on llama.cpp: the output-length check says so
        assert all("output tokens off" in r for r in others), verdict
