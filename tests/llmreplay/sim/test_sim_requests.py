"""Request parsing, prompt counting, output length, faults and wire encoding, in-process."""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmreplay.prefix_hash import prefix_block_hashes
from llmreplay.sim.config import SimConfig
from llmreplay.sim.faults import Fault, draw_fault, parse_fault_header
from llmreplay.sim.openai_request import InvalidRequest, parse_body
from llmreplay.sim.output_length import plan_output
from llmreplay.sim.prompt_shape import prompt_shape
from llmreplay.sim.wire import ChatEncoder, CompletionEncoder, chunk_frame, usage
from llmreplay.tokenizers import load_tokenizer


def chat(**fields) -> bytes:
    return json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}], **fields}).encode()


@pytest.mark.parametrize(
    "raw, endpoint, param",
    [
        (b"{not json", "chat_completions", None),
        (b"[1, 2]", "chat_completions", None),
        (b'{"model": "m"}', "chat_completions", "messages"),
        (b'{"model": "m", "messages": []}', "chat_completions", "messages"),
        (b'{"model": "m", "messages": [{"content": "x"}]}', "chat_completions", "messages"),
        (b'{"model": "m", "messages": [{"role": "user", "content": 5}]}', "chat_completions", "messages"),
        (chat(max_tokens="10"), "chat_completions", "max_tokens"),
        (chat(max_tokens=0), "chat_completions", "max_tokens"),
        (chat(stream="yes"), "chat_completions", "stream"),
        (chat(n=2), "chat_completions", "n"),
        (chat(tools=[{"type": "function"}]), "chat_completions", "tools"),
        (chat(tools=[{"type": "function", "function": {"name": "f"}}], tool_choice="sometimes"), "chat_completions", "tool_choice"),
        (chat(tools=[{"type": "function", "function": {"name": "f"}}], tool_choice={"type": "function", "function": {"name": "g"}}), "chat_completions", "tool_choice"),
        (b'{"model": "m"}', "completions", "prompt"),
        (b'{"model": "m", "prompt": ["a", "b"]}', "completions", "prompt"),
        (b'{"model": "m", "prompt": 7}', "completions", "prompt"),
        (b'{"model": 7, "prompt": "x"}', "completions", "model"),
    ],
)  # fmt: skip
def test_bad_bodies_are_invalid_requests_naming_the_param(raw, endpoint, param):
    with pytest.raises(InvalidRequest) as info:
        parse_body(raw, endpoint)
    assert info.value.status == 400 and info.value.param == param and str(info.value)


def test_chat_fields_are_read():
    request = parse_body(
        chat(stream=True, stream_options={"include_usage": True}, max_tokens=5, max_completion_tokens=7,
             min_tokens=2, ignore_eos=True),
        "chat_completions",
    )  # fmt: skip
    assert (request.stream, request.include_usage, request.max_tokens) == (True, True, 7)
    assert (request.min_tokens, request.ignore_eos, request.tool_name) == (2, True, None)
    assert request.prompt_texts == ("hi",) and request.message_count == 1


def test_completions_prompt_forms():
    assert parse_body(b'{"prompt": "abc"}', "completions").prompt_texts == ("abc",)
    assert parse_body(b'{"prompt": ["abc"]}', "completions").prompt_texts == ("abc",)
    assert parse_body(b'{"prompt": [1, 2, 3]}', "completions").prompt_token_ids == (1, 2, 3)
    assert parse_body(b'{"prompt": [[4, 5]]}', "completions").prompt_token_ids == (4, 5)


TOOLS = [
    {"type": "function", "function": {"name": "first"}},
    {"type": "function", "function": {"name": "second"}},
]


@pytest.mark.parametrize(
    "choice, last_role, expected",
    [
        (None, "user", "first"),  # auto by default: a user turn asks for a tool
        ("auto", "tool", None),  # after a tool result: words
        ("none", "user", None),
        ("required", "tool", "first"),
        ({"type": "function", "function": {"name": "second"}}, "tool", "second"),
    ],
)
def test_tool_choice_rule(choice, last_role, expected):
    fields = {"tools": TOOLS, "messages": [{"role": "user", "content": "q"}]}
    if last_role == "tool":
        fields["messages"].append({"role": "tool", "content": "r", "tool_call_id": "c"})
    if choice is not None:
        fields["tool_choice"] = choice
    request = parse_body(json.dumps({"model": "m", **fields}).encode(), "chat_completions")
    assert request.tool_name == expected
    assert request.prompt_texts[0] == json.dumps(TOOLS, separators=(",", ":"))  # tool definitions first


TEXT = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=60)


@settings(max_examples=40, deadline=None)
@given(st.lists(TEXT, min_size=1, max_size=5), st.integers(0, 3))
def test_prompt_tokens_are_exact_per_message_counts(texts, overhead):
    tokenizer = load_tokenizer()
    messages = [{"role": "user", "content": text} for text in texts]
    request = parse_body(json.dumps({"messages": messages}).encode(), "chat_completions")
    shape = prompt_shape(tokenizer, request, 4, overhead)
    assert shape.prompt_tokens == sum(tokenizer.count(t) + overhead for t in texts)
    assert len(shape.full_block_hashes) == shape.prompt_tokens // 4


def test_prompt_blocks_are_the_core_prefix_hashes():
    tokenizer = load_tokenizer()
    text = "one two three four five six seven eight nine ten eleven"
    request = parse_body(json.dumps({"prompt": text}).encode(), "completions")
    ids = tokenizer.encode(text)
    shape = prompt_shape(tokenizer, request, 4, 0)
    full = len(ids) - len(ids) % 4
    assert shape.full_block_hashes == tuple(prefix_block_hashes(ids[:full], 4))


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 500), st.integers(0, 600), st.booleans(), st.integers(0, 10**6))
def test_output_length_forced_exact_otherwise_capped(max_tokens, min_tokens, ignore_eos, seed):
    config = SimConfig(output_len_median_tokens=100, output_len_max_tokens=400)
    body = {"prompt": "x", "max_tokens": max_tokens, "min_tokens": min_tokens, "ignore_eos": ignore_eos}
    request = parse_body(json.dumps(body).encode(), "completions")
    tokens, reason = plan_output(request, config, random.Random(seed))
    if ignore_eos or min_tokens >= max_tokens:
        assert (tokens, reason) == (max_tokens, "length")
    else:
        assert min(min_tokens, max_tokens) <= tokens <= max_tokens
        assert reason == ("length" if tokens == max_tokens else "stop")


def test_output_length_distribution_without_max_tokens():
    config = SimConfig(output_len_median_tokens=50, output_len_sigma=0.5, output_len_max_tokens=300)
    request = parse_body(b'{"prompt": "x"}', "completions")
    rng = random.Random(1)
    draws = sorted(plan_output(request, config, rng)[0] for _ in range(2001))
    assert 40 <= draws[1000] <= 60 and draws[-1] <= 300 and draws[0] >= 1
    fixed = SimConfig(output_len_dist="fixed", output_len_median_tokens=17)
    assert plan_output(request, fixed, rng) == (17, "stop")


def test_fault_header_values():
    assert parse_fault_header("cut") == Fault("cut", 3)
    assert parse_fault_header(" 503 ") == Fault("503", 3)
    assert parse_fault_header("slow:250") == Fault(None, 0, 250.0)
    assert parse_fault_header("slow:250").label == "slow"
    for bad in ("slow:x", "slow:-1", "404", "explode"):
        with pytest.raises(InvalidRequest):
            parse_fault_header(bad)


def test_random_faults_follow_their_rates():
    rng = random.Random(3)
    none = SimConfig()
    assert all(draw_fault(none, True, 10, rng) == Fault() for _ in range(100))
    errors = SimConfig(error_rate=0.3, error_status=503)
    kinds = [draw_fault(errors, True, 10, rng).kind for _ in range(2000)]
    assert 0.25 < kinds.count("503") / 2000 < 0.35
    cuts = SimConfig(cut_rate=1.0)
    drawn = [draw_fault(cuts, True, 10, rng) for _ in range(200)]
    assert all(f.kind == "cut" and 0 <= f.stop_after_tokens <= 9 for f in drawn)
    assert draw_fault(cuts, False, 10, rng).kind is None  # cuts are for streams


def events(raw: bytes) -> list:
    assert raw.endswith(b"\n\n")
    out = []
    for block in raw.decode().split("\n\n")[:-1]:
        assert block.startswith("data: ")
        payload = block.removeprefix("data: ")
        out.append(payload if payload == "[DONE]" else json.loads(payload))
    return out


def test_chat_stream_events_concatenate_to_the_body():
    encoder = ChatEncoder("chatcmpl-1", 7, "m", None, "call_1")
    stream = encoder.opening() + b"".join(encoder.token(i, 3) for i in (1, 2, 3))
    stream += encoder.closing("stop", usage(5, 3, 0))
    parsed = events(stream)
    assert parsed[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    text = "".join(e["choices"][0]["delta"]["content"] for e in parsed[1:4])
    assert parsed[4]["choices"][0]["finish_reason"] == "stop" and parsed[4]["choices"][0]["delta"] == {}
    assert parsed[5]["choices"] == [] and parsed[5]["usage"]["total_tokens"] == 8
    assert parsed[6] == "[DONE]"
    body = encoder.body(3, "stop", usage(5, 3, 0))
    assert body["choices"][0]["message"]["content"] == text and body["object"] == "chat.completion"


@pytest.mark.parametrize("tokens", [1, 2, 5])
def test_tool_call_arguments_are_valid_json_when_complete(tokens):
    encoder = ChatEncoder("chatcmpl-1", 7, "m", "lookup", "call_1")
    parsed = events(b"".join(encoder.token(i, tokens) for i in range(1, tokens + 1)))
    calls = [e["choices"][0]["delta"]["tool_calls"][0] for e in parsed]
    assert calls[0]["function"]["name"] == "lookup" and calls[0]["id"] == "call_1"
    arguments = "".join(c["function"]["arguments"] for c in calls)
    assert isinstance(json.loads(arguments), dict)
    body = encoder.body(tokens, "tool_calls", usage(1, tokens, 0))
    assert body["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] == arguments


def test_completion_stream_events():
    encoder = CompletionEncoder("cmpl-1", 7, "m")
    parsed = events(encoder.token(1, 2) + encoder.token(2, 2) + encoder.closing("length", None))
    assert [e["choices"][0]["text"] for e in parsed[:2]] == [" the", " of"]
    assert parsed[2]["choices"][0]["finish_reason"] == "length" and parsed[3] == "[DONE]"
    assert encoder.opening() == b""


@pytest.mark.parametrize(
    "encoder",
    [ChatEncoder("c", 1, "m", None, "x"), ChatEncoder("c", 1, "m", "f", "x"), CompletionEncoder("c", 1, "m")],
)
def test_pre_framed_tokens_equal_framed_events(encoder):
    for number in range(1, 60):
        assert encoder.token_frame(number, 60) == chunk_frame(encoder.token(number, 60))
    assert chunk_frame(b"abc") == b"3\r\nabc\r\n"
