"""End to end: the real recorder in front of the real sim, driven by the official `openai` SDK's Responses
API and the `anthropic` SDK: one row each, the dialect's shape and normalised usage, x-api-key never on
disk, a 3-turn Responses session chained by previous_response_id linked into one session; the recorded
trace anonymizes with --verify passing."""

from __future__ import annotations

import json
import subprocess

import anthropic
import pytest
from live_processes import llmreplay_cmd

from llmreplay.tokenizers import load_tokenizer
from llmreplay.trace_io import read_trace
from recorder.keys import keyed_hash, load_or_create_key
from tests.e2e.recorder.test_recorder import API_KEY, TOKENIZER, client, start_recorder, stop

pytestmark = pytest.mark.e2e  # every test here starts processes

INSTRUCTIONS = "You are a terse travel agent."
SYSTEM = [{"type": "text", "text": "You plan trips.", "cache_control": {"type": "ephemeral"}}]


def anonymize_verified(trace, tmp_path):
    """`llmreplay anonymize --verify` of the recorded trace, which must pass with every text exact."""
    anonymized = tmp_path / "anonymized.parquet"
    done = subprocess.run(
        llmreplay_cmd("anonymize", str(trace), "-o", str(anonymized), "--tokenizer", TOKENIZER, "--verify"),
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0 and "verification PASSED" in done.stdout, done.stdout + done.stderr
    assert "0 missed" in done.stdout
    return anonymized


def _responses_turn(cli, name: str, text: str, previous: str | None, stream: bool) -> str:
    """One Responses turn; the id the answer carries (from its response events when streamed)."""
    kwargs = dict(
        model="sim-model",
        instructions=INSTRUCTIONS,
        input=[{"role": "user", "content": text}],
        max_output_tokens=12,
        extra_headers={"X-Request-Id": name},
    )
    if previous is not None:
        kwargs["previous_response_id"] = previous
    if not stream:
        return cli.responses.create(**kwargs).id
    found = None
    for event in cli.responses.create(stream=True, **kwargs):
        if event.type in ("response.created", "response.completed", "response.incomplete"):
            found = event.response.id
    assert found
    return found


def _anthropic_turns(base: str) -> None:
    claude = anthropic.Anthropic(base_url=base, api_key=API_KEY, max_retries=0, timeout=30)
    first = [{"role": "user", "content": [{"type": "text", "text": "Two days in Lisbon?"}]}]
    with claude.messages.stream(
        model="sim-model", max_tokens=10, system=SYSTEM, messages=first, extra_headers={"X-Request-Id": "m0"}
    ) as stream:
        answer = "".join(stream.text_stream)
    history = first + [
        {"role": "assistant", "content": [{"type": "text", "text": answer}]},
        {"role": "user", "content": "And Porto?"},
    ]
    claude.messages.create(
        model="sim-model", max_tokens=8, system=SYSTEM, messages=history, extra_headers={"X-Request-Id": "m1"}
    )


def test_responses_and_messages_recorded_chained_and_keyless(processes, start_sim, tmp_path):
    sim = start_sim("--profile", "fast")
    out = tmp_path / "trace"
    base, recorder = start_recorder(processes, tmp_path, sim, out, "--content")
    cli = client(base)
    first = _responses_turn(cli, "r0", "Plan a day in Rome.", None, stream=True)
    second = _responses_turn(cli, "r1", "Make it cheaper.", first, stream=True)
    _responses_turn(cli, "r2", "Thanks.", second, stream=False)
    _anthropic_turns(base)
    stop(recorder)

    rows = sorted(read_trace(out).table.to_pylist(), key=lambda r: r["arrival_time"])
    assert [r["endpoint"] for r in rows] == ["responses"] * 3 + ["messages"] * 2
    assert all(r["error_kind"] is None and r["token_source"] == "server_usage" for r in rows)
    key = load_or_create_key(tmp_path / "recorder.key")
    assert {r["api_key_hash"] for r in rows} == {keyed_hash(key, API_KEY, "k")}  # x-api-key too
    for path in [p for p in tmp_path.rglob("*") if p.is_file() and "mitmproxy" not in p.parts]:
        assert API_KEY.encode() not in path.read_bytes(), path

    chain = rows[:3]
    assert len({r["session_id"] for r in chain}) == 1 and [r["turn_index"] for r in chain] == [0, 1, 2]
    assert [r["parent_request_id"] for r in chain] == [None, chain[0]["request_id"], chain[1]["request_id"]]
    assert [r["server_state"] for r in chain] == [None, "previous_response_id", "previous_response_id"]
    assert first not in json.dumps([r["content_messages"] for r in rows])  # the ids are not stored
    tokenizer = load_tokenizer(TOKENIZER)
    for row, text in zip(chain, ("Plan a day in Rome.", "Make it cheaper.", "Thanks."), strict=True):
        assert json.loads(row["content_system"]) == INSTRUCTIONS
        assert json.loads(row["content_messages"]) == [{"role": "user", "content": text}]
        assert [(m["role"], m["tokens"]) for m in row["messages"]] == [
            ("system", tokenizer.count(INSTRUCTIONS)),
            ("user", tokenizer.count(text)),
        ]
        assert row["max_tokens"] == 12 and 0 < row["completion_tokens"] <= 12
    # the sim counts the stored history of a chained turn: the prompt grows turn by turn
    assert chain[0]["prompt_tokens"] < chain[1]["prompt_tokens"] < chain[2]["prompt_tokens"]
    for row in (chain[0], chain[1], rows[3]):
        assert row["stream"] and row["ttft_ns"] is not None and row["ttfo_ns"] is not None
        assert len(row["chunk_offsets_ns"]) >= 1 and row["e2e_ns"] >= row["ttft_ns"]

    m0, m1 = rows[3:]
    assert json.loads(m0["content_system"]) == SYSTEM and m0["max_tokens"] == 10
    assert [m["role"] for m in m1["messages"]] == ["system", "user", "assistant", "user"]
    assert (m0["session_id"], m1["session_id"], m1["turn_index"]) == (m0["session_id"],) * 2 + (1,)
    assert m1["parent_request_id"] == m0["request_id"]
    assert 0 < m0["completion_tokens"] <= 10 and 0 < m1["completion_tokens"] <= 8
    for row in (m0, m1):  # normalised: the engine processed input + cache reads + cache writes
        assert row["cache_write_tokens"] is not None and row["cached_tokens"] is not None
        assert row["prompt_tokens"] >= row["cached_tokens"] + row["cache_write_tokens"]
        assert row["prompt_tokens"] >= sum(m["tokens"] for m in row["messages"]) // 2

    anonymized = anonymize_verified(out, tmp_path)
    after = read_trace(anonymized).table.to_pylist()
    assert [r["endpoint"] for r in after] == [r["endpoint"] for r in rows]
    assert INSTRUCTIONS not in json.dumps([r["content_system"] for r in after])


def test_thinking_and_reasoning_are_timed_and_a_thinking_turn_echoed_back_links(
    processes, start_sim, tmp_path
):
    sim = start_sim("--profile", "fast", "--reasoning-tokens", "4")
    out = tmp_path / "trace"
    base, recorder = start_recorder(processes, tmp_path, sim, out, "--content")
    claude = anthropic.Anthropic(base_url=base, api_key=API_KEY, max_retries=0, timeout=30)
    first = [{"role": "user", "content": "Think, then answer: a day in Kyoto?"}]
    with claude.messages.stream(model="sim-model", max_tokens=12, messages=first) as stream:
        answer = stream.get_final_message()
    echoed = [block.model_dump(exclude_none=True) for block in answer.content]  # thinking + signature, text
    history = first + [{"role": "assistant", "content": echoed}, {"role": "user", "content": "And Nara?"}]
    claude.messages.create(model="sim-model", max_tokens=12, messages=history)
    for _ in client(base).responses.create(
        model="sim-model", input="Why?", max_output_tokens=12, stream=True
    ):
        pass
    stop(recorder)

    m0, m1, r0 = sorted(read_trace(out).table.to_pylist(), key=lambda r: r["arrival_time"])
    assert [block["type"] for block in echoed] == ["thinking", "text"]
    for row in (m0, r0):  # TTFT at the first thinking/reasoning token, TTFO at the first answer token
        assert row["reasoning_tokens"] == 4 and row["completion_tokens"] == 12
        assert row["ttfo_ns"] > row["ttft_ns"] and row["reasoning_ns"] == row["ttfo_ns"] - row["ttft_ns"]
    assert (m1["session_id"], m1["turn_index"], m1["parent_request_id"]) == (
        m0["session_id"],
        1,
        m0["request_id"],
    )
    anonymized = anonymize_verified(out, tmp_path)
    thinking = json.loads(read_trace(anonymized).table.to_pylist()[1]["content_messages"])[1]["content"][0]
    assert (
        len(thinking["signature"]) == len(echoed[0]["signature"])
        and thinking["signature"] != echoed[0]["signature"]
    )
