"""The preflight: its checks as pure functions on tiny facts, its requests against `llmreplay sim`
(vLLM-like: forces lengths, reports cached tokens, answers n=1 only), and the replay's use of it."""

from __future__ import annotations

import json
import subprocess

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from bad_input import refused
from live_processes import llmreplay_cmd
from replay_helpers import ROOT, content_record, run_info, stop_and_wait, write_content_trace

from llmreplay.engines import BY_NAME
from llmreplay.wire.response import ResponseShape
from replayer.config import ReplayConfig
from replayer.plan.trace_rows import read_trace_rows
from replayer.preflight import (
    OK,
    REQUEST_ID_PREFIX,
    STOP,
    UNVERIFIED,
    WARN,
    Answer,
    Use,
    check_cached,
    check_context,
    check_feature,
    check_length,
    run_preflight,
    trace_needs,
)
from replayer.target import probe_target

VLLM, OPENAI, LLAMA = BY_NAME["vllm"], BY_NAME["openai"], BY_NAME["llamacpp"]
TOOLS = json.dumps([{"type": "function", "function": {"name": "lookup"}}])


def _table(**columns) -> pa.Table:
    n = len(next(iter(columns.values())))
    base = {
        "endpoint": ["chat_completions"] * n,
        "model": ["m"] * n,
        "stream": [False] * n,
        "prompt_tokens": [10] * n,
        "completion_tokens": [5] * n,
        "max_tokens": [None] * n,
        "tools_count": [0] * n,
        "tool_choice": [None] * n,
        "structured_output": ["none"] * n,
        "n": [None] * n,
    }
    base.update(columns)
    types = {
        "max_tokens": pa.int32(),
        "completion_tokens": pa.int32(),
        "tool_choice": pa.string(),
        "n": pa.int16(),
    }
    return pa.table({name: pa.array(values, types.get(name)) for name, values in base.items()})


def test_needs_count_planned_requests_copies_included():
    table = _table(
        tools_count=[2, 2, 0, 0],
        tool_choice=["required", None, None, None],
        structured_output=["none", "none", "json_schema", "none"],
        n=[None, None, 3, 1],
        stream=[True, False, False, False],
        prompt_tokens=[10, 20, 4000, 30],
        completion_tokens=[5, None, 100, 1],
        max_tokens=[None, 7, None, None],
        model=["a", "b", "b", "c"],
    )
    needs = trace_needs(table, np.array([0, 1, 1, 2, 2, 2]), None)  # row 3 never planned
    assert needs.requests == 6 and needs.generating == 6 and needs.endpoint == "chat_completions"
    assert needs.model == "b"  # the commonest among planned rows (b: rows 1 and 2)
    assert needs.request_tokens.tolist() == [15, 27, 27, 4100, 4100, 4100]
    assert set(needs.uses) == {
        Use("tools", "required", 1),
        Use("tools", "unset", 2),
        Use("response_format", "json_schema", 3),
        Use("n", "3", 3),
        Use("stream", "with usage", 1),
    }
    assert trace_needs(table, np.array([3]), "override").model == "override"
    assert trace_needs(table, np.array([3]), None).uses == ()


def _ok(completion: int | None = 6, cached: int | None = None, prompt: int = 700) -> Answer:
    return Answer(
        200, ResponseShape(completion_tokens=completion, cached_tokens=cached, prompt_tokens=prompt)
    )


def test_length_forced_short_refused_or_impossible_is_never_a_stop():
    assert check_length(_ok(6), VLLM).outcome == OK
    short = check_length(_ok(3), LLAMA)
    assert short.outcome == WARN and "ignore_eos, n_predict" in short.detail and "got 3" in short.detail
    refused = check_length(Answer(400, error="unknown field ignore_eos"), VLLM)
    assert refused.outcome == WARN and "--engine openai" in refused.fix and "HTTP 400" in refused.detail
    assert check_length(_ok(6), OPENAI).outcome == WARN  # cannot force: a warning, never a stop
    assert check_length(Answer(None, error="timed out"), VLLM).outcome == UNVERIFIED
    assert check_length(Answer(503, error="busy"), VLLM).outcome == UNVERIFIED
    assert check_length(Answer(429, error="slow down"), VLLM).outcome == UNVERIFIED
    assert check_length(Answer(401, error="invalid credentials"), VLLM).outcome == UNVERIFIED


def test_cached_tokens_reported_or_the_flag_that_would():
    assert check_cached(_ok(1, cached=512), VLLM).outcome == OK
    missing = check_cached(_ok(1, cached=0), VLLM)
    assert missing.outcome == WARN and missing.fix == "start the server with --enable-prompt-tokens-details"
    assert check_cached(None, OPENAI).outcome == WARN
    assert check_cached(Answer(None, error="gone"), VLLM).outcome == UNVERIFIED


def test_context_counts_the_requests_that_cannot_fit():
    tokens = np.array([100, 5000, 9000, 9000])
    some = check_context(8192, tokens)
    assert some.outcome == WARN and "2 of 4 requests" in some.detail and "answered 400" in some.detail
    assert "9,000" in some.detail
    assert check_context(8192, np.array([9000, 9001])).outcome == STOP
    assert check_context(16384, tokens).outcome == OK
    assert check_context(None, tokens).outcome == UNVERIFIED


def test_a_refused_feature_stops_only_when_it_leaves_nothing_to_measure():
    refusal = Answer(400, error='"auto" tool choice requires --enable-auto-tool-choice')
    tools = check_feature(Use("tools", "auto", 1), refusal, VLLM, requests=100)
    assert tools.outcome == STOP and "--enable-auto-tool-choice --tool-call-parser" in tools.fix
    assert check_feature(Use("n", "2", 5), refusal, VLLM, 100).outcome == WARN
    assert check_feature(Use("n", "2", 100), refusal, VLLM, 100).outcome == STOP
    assert check_feature(Use("tools", "auto", 1), Answer(500, error="boom"), VLLM, 100).outcome == UNVERIFIED
    assert check_feature(Use("tools", "auto", 1), _ok(2), VLLM, 100).outcome == OK
    no_usage = check_feature(Use("stream", "with usage", 3), _ok(None), VLLM, 3)
    assert no_usage.outcome == WARN and "no usage" in no_usage.detail


def _trace(tmp_path, records):
    return write_content_trace(tmp_path / "trace.parquet", records)


def _preflight(url, trace, **config):
    rows = read_trace_rows(trace)
    cfg = ReplayConfig(trace_path=str(trace), target_url=url, run_dir="unused", **config)
    needs = trace_needs(rows.table, np.arange(len(rows)), cfg.model)
    return run_preflight(cfg, probe_target(url, "detect", None), needs)


def test_against_the_sim_lengths_forced_cache_reported_features_tried(tmp_path, start_sim_in_process):
    sim = start_sim_in_process("fast", log_path=tmp_path / "truth.parquet")
    records = [
        content_record(0, 0.0),
        content_record(1, 1.0, tools_count=1, tool_choice="required", content_tools=TOOLS),
        content_record(2, 2.0, n=2),
        content_record(3, 3.0, stream=False, structured_output="json_object"),
    ]
    found = _preflight(sim.url, _trace(tmp_path, records))
    sim.stop()
    checks = {c.name: c for c in found.checks}
    assert (found.engine, found.engine_from) == ("vllm", "owned_by")
    assert checks["length"].outcome == OK and checks["cached_tokens"].outcome == OK
    assert checks["tools:required"].outcome == OK and checks["response_format:json_object"].outcome == OK
    assert checks["stream:with usage"].outcome == OK
    assert checks["n:2"].outcome == WARN and "n=1 only" in checks["n:2"].detail  # 1 of 4: a warning
    assert checks["context"].outcome == UNVERIFIED  # the sim states no context length
    logged = pq.read_table(sim.log_path).to_pylist()
    assert [r["request_id"] for r in logged] == [
        f"{REQUEST_ID_PREFIX}{i}" for i in range(1, found.requests_sent + 1)
    ]
    assert logged[0]["completion_tokens"] == 6 and logged[2]["cached_tokens"] > 0


def test_a_silent_target_gets_one_request_and_no_stop(tmp_path, start_sim_in_process):
    sim = start_sim_in_process("fast", log_path=tmp_path / "truth.parquet")
    trace = _trace(tmp_path, [content_record(0, 0.0, tools_count=1, tool_choice="auto", content_tools=TOOLS)])
    found = _preflight(sim.url, trace, headers=(("X-Sim-Fault", "hang"),), read_timeout_ns=300_000_000)
    sim.stop()
    assert found.requests_sent == 1 and found.stop is None
    assert {c.outcome for c in found.checks} == {UNVERIFIED}


@pytest.mark.e2e
def test_a_trace_the_target_refuses_entirely_stops_with_one_line(tmp_path, start_sim_in_process):
    sim = start_sim_in_process("fast")
    trace = _trace(tmp_path, [content_record(i, i * 10.0, n=2) for i in range(3)])
    line = refused("replay", str(trace), "--target", sim.url, "-o", str(tmp_path / "run"))
    assert line.startswith("llmreplay: error: preflight: n:2: refused (3 of 3 requests use it)")
    assert "--skip-preflight" in line and not (tmp_path / "run").exists()


@pytest.mark.e2e
def test_skip_preflight_sends_none_and_run_json_keeps_what_was_found(tmp_path, start_sim, processes):
    log = tmp_path / "truth.parquet"
    url = start_sim("--profile", "fast", "--log", str(log))
    trace = _trace(tmp_path, [content_record(i, i * 20.0) for i in range(3)])
    for name, flags in (("skipped", ["--skip-preflight"]), ("checked", [])):
        cmd = llmreplay_cmd(
            "replay", str(trace), "--target", url, "-o", str(tmp_path / name), "--quiet", *flags
        )
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=90)
        assert done.returncode in (0, 1), done.stderr  # the verdict is not under test
    stop_and_wait(processes.procs[-1])
    skipped, checked = run_info(tmp_path / "skipped"), run_info(tmp_path / "checked")
    assert skipped["preflight"] is None and skipped["config"]["skip_preflight"] is True
    found = checked["preflight"]
    assert {c["name"]: c["outcome"] for c in found["checks"]}["length"] == OK
    logged = pq.read_table(log).to_pylist()
    preflight = [r for r in logged if r["request_id"].startswith(REQUEST_ID_PREFIX)]
    assert len(preflight) == found["requests_sent"] > 0
    assert min(r["arrival_unix_ns"] for r in preflight) > skipped["ended_unix_ns"]  # all the second run's
    assert len(logged) - len(preflight) == 6  # both replays' requests


def test_the_probes_go_to_the_commonest_api_and_say_where_length_cannot_be_forced():
    endpoints = ["responses"] * 3 + ["messages"] * 2 + ["embeddings"]
    needs = trace_needs(_table(endpoint=endpoints), np.arange(6), None)
    assert (needs.generating, needs.endpoint) == (5, "responses")
    shape = ResponseShape(text="x", completion_tokens=3)
    on_messages = check_length(Answer(200, shape), VLLM, endpoint="messages")
    assert on_messages.outcome == WARN and "on /v1/messages" in on_messages.detail
    on_responses = check_length(
        Answer(200, ResponseShape(text="x", completion_tokens=6)), VLLM, endpoint="responses"
    )
    assert on_responses.outcome == OK and "ignore_eos" in on_responses.detail


def test_against_the_sim_a_responses_and_messages_trace_is_probed_in_its_apis(tmp_path, start_sim_in_process):
    sim = start_sim_in_process("fast", log_path=tmp_path / "truth.parquet")
    items = json.dumps([{"role": "user", "content": "hi"}])
    records = [
        content_record(0, 0.0, endpoint="responses", content_messages=items),
        content_record(1, 1.0, endpoint="responses", content_messages=items, stream=False),
        content_record(2, 2.0, endpoint="messages", content_messages=items),
    ]
    found = _preflight(sim.url, _trace(tmp_path, records))
    sim.stop()
    checks = {c.name: c for c in found.checks}
    assert checks["length"].outcome == OK and "ignore_eos" in checks["length"].detail
    assert checks["cached_tokens"].outcome == OK and checks["stream:with usage"].outcome == OK
    assert {r["endpoint"] for r in pq.read_table(sim.log_path).to_pylist()} == {"responses"}
