"""Responses and Messages traces replayed against `llmreplay sim`: every request succeeds, prompt and
output lengths are the trace's, and a chained Responses session is sent with staging's own ids."""

from __future__ import annotations

import json
import subprocess

import pytest
from live_processes import llmreplay_cmd
from replay_helpers import T0_US, results, run_info, run_replay, write_content_trace

from llmreplay.trace_format import MessageShape, TraceMeta, TraceRecord
from llmreplay.trace_io import write_trace

pytestmark = pytest.mark.e2e  # every test here starts processes

# The sim draws no output shorter than this, so a limit alone (Messages on vLLM: no forcing field)
# ends every answer at exactly the recorded length.
NEVER_EOS = ("--output-len-min-tokens", "2048", "--output-len-max-tokens", "2048")
SHAPES = {
    "responses": (MessageShape("system", 12), MessageShape("user", 40)),
    "messages": (MessageShape("system", 10), MessageShape("user", 30), MessageShape("assistant", 9)),
}


def shape_record(i: int, endpoint: str, **kw) -> TraceRecord:
    shapes = SHAPES[endpoint]
    values = dict(
        request_id=f"{endpoint}-{i}",
        arrival_time=T0_US + i * 40_000,
        endpoint=endpoint,
        model="sim-model",
        stream=i % 2 == 0,
        messages=shapes,
        prompt_tokens=sum(s.tokens for s in shapes) + 20 + i,  # the template's tokens and a few more
        completion_tokens=6 + i,
        token_source="server_usage",
    )
    return TraceRecord(**{**values, **kw})


def turn(s: int, k: int, chained: bool, **kw) -> TraceRecord:
    """Turn k of chained Responses session s: after the first, only the new input and the parent's id."""
    return TraceRecord(
        request_id=f"s{s}t{k}",
        session_id=f"s{s}",
        turn_index=k,
        parent_request_id=f"s{s}t{k - 1}" if k else None,
        server_state="previous_response_id" if k and chained else None,
        think_time_ns=5_000_000 if k else None,
        arrival_time=T0_US + (s * 10 + k) * 20_000,
        endpoint="responses",
        model="sim-model",
        stream=k % 2 == 1,
        prompt_tokens=20,
        completion_tokens=5 + k,
        token_source="server_usage",
        content_messages=json.dumps([{"role": "user", "content": f"session {s} question {k}"}]),
        content_response=f"answer {k} of session {s}" if k else "the first answer",
        **kw,
    )


def test_responses_and_messages_shapes_replay_with_exact_lengths(tmp_path, sim_with_truth):
    records = [shape_record(i, endpoint) for i in range(4) for endpoint in SHAPES]
    records.sort(key=lambda r: r.arrival_time)
    trace = write_trace(tmp_path / "t.parquet", records, TraceMeta(source="test"))
    url, truth = sim_with_truth("--profile", "fast", *NEVER_EOS)
    out = tmp_path / "run"
    done = run_replay(trace, url, out, "--max-dispatch-lag", "1s")
    assert done.returncode in (0, 1), done.stderr[-2000:]
    server = truth()
    rows = {r["request_id"]: r for r in results(out)}
    assert len(rows) == len(records)
    for rec in records:
        row, seen = rows[rec.request_id], server[rec.request_id]
        assert row["error_kind"] is None and seen["endpoint"] == rec.endpoint, (row, seen)
        assert seen["prompt_tokens"] == rec.prompt_tokens, rec.request_id  # fitted on the sim's /tokenize
        assert seen["completion_tokens"] == rec.completion_tokens == row["completion_tokens"]
        assert row["prompt_tokens"] == rec.prompt_tokens  # the answer's usage, normalised
    fit = run_info(out)["builder"]["prompt_fit"]
    assert fit["synthesized_off"] == 0, fit
    compared = subprocess.run(
        llmreplay_cmd("compare", str(trace), str(out), "--json", "--max-dispatch-lag", "1s"),
        capture_output=True, text=True, timeout=90,
    )  # fmt: skip
    assert compared.returncode == 0, compared.stderr[-2000:]
    result = json.loads(compared.stdout)
    assert not result["fidelity"]["unfaithful"], result["fidelity"]
    assert result["apis"]["same"] and result["apis"]["candidate"] == {"messages": 4, "responses": 4}
    assert {b["bucket"] for b in result["buckets"] if b["dimension"] == "endpoint"} == set(SHAPES)


@pytest.mark.parametrize("mode", ["chain", "expand"])
def test_a_chained_responses_session_is_sent_with_staging_ids_or_expanded(tmp_path, sim_with_truth, mode):
    """chain: the sim answers an id it did not issue with 404, so every turn succeeding means each sent
    staging's id, and the prompt grows by the history the sim holds; expand: the same history, sent."""
    records = [turn(s, k, chained=True) for s in range(2) for k in range(4)]
    records.sort(key=lambda r: r.arrival_time)
    trace = write_content_trace(tmp_path / "t.parquet", records)
    url, truth = sim_with_truth("--profile", "fast", *NEVER_EOS)
    out = tmp_path / "run"
    done = run_replay(trace, url, out, "--responses-state", mode, "--max-dispatch-lag", "1s")
    assert done.returncode in (0, 1), done.stderr[-2000:]
    server = truth()
    rows = {r["request_id"]: r for r in results(out)}
    assert all(r["error_kind"] is None for r in rows.values()), [r["error_kind"] for r in rows.values()]
    for s in range(2):
        prompts = [server[f"s{s}t{k}"]["prompt_tokens"] for k in range(4)]
        outputs = [server[f"s{s}t{k}"]["completion_tokens"] for k in range(4)]
        assert outputs == [5, 6, 7, 8]
        for k in range(1, 4):  # each turn's prompt holds the previous prompt and its answer
            assert prompts[k] > prompts[k - 1] + outputs[k - 1], (mode, prompts, outputs)
    state = run_info(out)["builder"]["responses_state"]
    assert state == {
        "mode": mode,
        "chained": 6 if mode == "chain" else 0,
        "expanded": 0 if mode == "chain" else 6,
        "expanded_parent_not_previous": 0,
    }
    preflight = run_info(out)["preflight"]
    assert any(c["name"] == "responses_state" and mode in c["detail"] for c in preflight["checks"])


def test_recorded_with_the_sdks_anonymized_replayed_and_compared_faithful(processes, start_sim, tmp_path):
    """Issue #19's whole path: the openai SDK's Responses API (a 3-turn previous_response_id chain) and the
    anthropic SDK through the recorder in front of the sim -> anonymize --verify -> replay (chain) ->
    compare of the anonymized recording with the run: faithful, exit 0."""
    from tests.e2e.recorder.test_agentic import _anthropic_turns, _responses_turn
    from tests.e2e.recorder.test_recorder import TOKENIZER, client, start_recorder, stop

    sim = start_sim("--profile", "fast", *NEVER_EOS)
    recorded, anonymized, out = tmp_path / "trace", tmp_path / "anonymized.parquet", tmp_path / "run"
    base, recorder = start_recorder(processes, tmp_path, sim, recorded, "--content")
    cli = client(base)
    first = _responses_turn(cli, "r0", "Plan a day in Rome.", None, stream=True)
    second = _responses_turn(cli, "r1", "Make it cheaper.", first, stream=True)
    _responses_turn(cli, "r2", "Thanks.", second, stream=False)
    _anthropic_turns(base)
    stop(recorder)
    done = subprocess.run(
        llmreplay_cmd("anonymize", str(recorded), "-o", str(anonymized), "--tokenizer", TOKENIZER, "--verify"),
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    replayed = run_replay(anonymized, sim, out, "--fit-lengths", "--max-dispatch-lag", "1s")
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr[-2000:]
    rows = results(out)
    assert len(rows) == 5 and all(r["error_kind"] is None for r in rows)
    assert all(r["completion_tokens"] == r["recorded_completion_tokens"] for r in rows)
    assert run_info(out)["builder"]["responses_state"]["chained"] == 2
    compared = subprocess.run(
        llmreplay_cmd("compare", str(anonymized), str(out), "--json", "--max-dispatch-lag", "1s"),
        capture_output=True, text=True, timeout=90,
    )  # fmt: skip
    result = json.loads(compared.stdout)
    assert compared.returncode == 0 and not result["fidelity"]["unfaithful"], result["fidelity"]
