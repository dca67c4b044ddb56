"""The official anthropic SDK's `messages.create` / `messages.stream` against a real sim (in this
process): text, tool_use, thinking, forced lengths, cache reads, faults and bad bodies; the ground truth."""

from __future__ import annotations

import anthropic
import pyarrow.parquet as pq
import pytest

from llmreplay.tokenizers import load_tokenizer

SYSTEM = "Be brief and answer in plain words."
STORY = "Tell me a long story about a lighthouse keeper who finds a message in a bottle on the shore."
USER = [{"role": "user", "content": "Name three colours."}]
TOOLS = [
    {
        "name": "get_weather",
        "description": "The weather in a city.",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
    }
]
FORCED = {"ignore_eos": True}


@pytest.fixture(scope="module")
def sim(module_sim_in_process):
    return module_sim_in_process(models=("sim-model",), block_size=16)


@pytest.fixture(scope="module")
def client(sim):
    return anthropic.Anthropic(base_url=sim.url, api_key="unused", max_retries=0, timeout=20)


@pytest.fixture(scope="module")
def count():
    return load_tokenizer().count


def test_create_forced_length(client, count):
    message = client.messages.create(
        model="sim-model", system=SYSTEM, messages=USER, max_tokens=7, extra_body=FORCED
    )
    assert message.type == "message" and message.role == "assistant" and message.id.startswith("msg_")
    assert message.stop_reason == "max_tokens" and message.usage.output_tokens == 7
    assert len(message.content[0].text.split()) == 7
    assert message.usage.input_tokens == count(SYSTEM) + count(USER[0]["content"])
    assert message.usage.cache_read_input_tokens == 0


def test_stream_follows_the_grammar(client):
    with client.messages.stream(model="sim-model", messages=USER, max_tokens=5, extra_body=FORCED) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_message()
    assert kinds == [
        "message_start", "content_block_start", *["content_block_delta", "text"] * 5, "content_block_stop",
        "message_delta", "message_stop",
    ]  # fmt: skip
    assert final.stop_reason == "max_tokens" and final.usage.output_tokens == 5
    assert len(final.content) == 1 and len(final.content[0].text.split()) == 5


def test_unforced_answer_ends_its_turn(client):
    message = client.messages.create(model="sim-model", messages=USER, max_tokens=2000)
    assert message.stop_reason == "end_turn" and 1 <= message.usage.output_tokens < 2000


def test_tool_use_streamed_and_not(client):
    body = {"model": "sim-model", "messages": USER, "tools": TOOLS, "max_tokens": 6, "extra_body": FORCED}
    message = client.messages.create(**body)
    block = message.content[0]
    assert message.stop_reason == "tool_use" and block.type == "tool_use" and block.name == "get_weather"
    assert isinstance(block.input, dict) and block.id.startswith("toolu_")
    with client.messages.stream(**body) as stream:
        events = list(stream)
        final = stream.get_final_message()
    fragments = [e.delta.partial_json for e in events if e.type == "content_block_delta"]
    assert len(fragments) == 6 and final.content[0].input == block.input
    # a user turn of tool results is answered in words
    result = {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": block.id, "content": "sunny"}],
    }
    turn = [*USER, {"role": "assistant", "content": [block.model_dump()]}, result]
    answer = client.messages.create(model="sim-model", messages=turn, tools=TOOLS, max_tokens=4)
    assert answer.content[0].type == "text"


def test_thinking_block_first_with_signature(client):
    with client.messages.stream(
        model="sim-model", messages=USER, max_tokens=8, extra_body=FORCED,
        extra_headers={"X-Sim-Reasoning-Tokens": "3"},
    ) as stream:  # fmt: skip
        events = list(stream)
        final = stream.get_final_message()
    deltas = [e.delta.type for e in events if e.type == "content_block_delta"]
    assert deltas == ["thinking_delta"] * 3 + ["signature_delta"] + ["text_delta"] * 5
    assert [block.type for block in final.content] == ["thinking", "text"]
    assert len(final.content[0].thinking.split()) == 3 and final.content[0].signature
    assert final.usage.output_tokens == 8
    message = client.messages.create(
        model="sim-model", messages=USER, max_tokens=8, extra_body=FORCED,
        extra_headers={"X-Sim-Reasoning-Tokens": "3"},
    )  # fmt: skip
    assert [block.type for block in message.content] == ["thinking", "text"]


def test_repeated_prefix_is_a_cache_read(client, count):
    body = {"model": "sim-model", "messages": [{"role": "user", "content": STORY * 3}], "max_tokens": 2}
    first = client.messages.create(**body, extra_body=FORCED)
    with client.messages.stream(**body, extra_body=FORCED) as stream:
        start = next(iter(stream))
        again = stream.get_final_message()
    prompt_tokens = count(STORY * 3)
    assert first.usage.input_tokens == prompt_tokens and first.usage.cache_read_input_tokens == 0
    cached = again.usage.cache_read_input_tokens
    assert cached % 16 == 0 and prompt_tokens - 16 <= cached < prompt_tokens
    assert again.usage.input_tokens + cached == prompt_tokens  # input_tokens excludes the cache reads
    assert start.type == "message_start" and start.message.usage.cache_read_input_tokens == cached


@pytest.mark.parametrize(
    ("fault", "error", "kind"),
    [
        ("500", anthropic.InternalServerError, "api_error"),
        ("503", anthropic.InternalServerError, "overloaded_error"),
        ("429", anthropic.RateLimitError, "rate_limit_error"),
    ],
)
def test_immediate_faults_in_anthropic_shape(client, fault, error, kind):
    with pytest.raises(error) as caught:
        client.messages.create(
            model="sim-model", messages=USER, max_tokens=4, extra_headers={"X-Sim-Fault": fault}
        )
    assert caught.value.body["type"] == "error" and caught.value.body["error"]["type"] == kind


def test_stream_error_is_an_error_event(client):
    texts = []
    with pytest.raises(anthropic.APIStatusError) as caught:
        with client.messages.stream(
            model="sim-model", messages=USER, max_tokens=8, extra_body=FORCED,
            extra_headers={"X-Sim-Fault": "stream_error"},
        ) as stream:  # fmt: skip
            texts.extend(stream.text_stream)
    assert len(texts) == 3 and caught.value.body["error"]["type"] == "api_error"


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ({"model": "sim-model", "messages": USER}, "max_tokens"),
        ({"model": "sim-model", "max_tokens": 4}, "messages"),
        ({"model": "sim-model", "max_tokens": 4, "messages": [{"role": "system", "content": "x"}]}, "role"),
        ({"model": "sim-model", "max_tokens": 4, "messages": USER, "tools": [{"type": "custom"}]}, "tools"),
        (
            {
                "model": "sim-model",
                "max_tokens": 4,
                "messages": USER,
                "tools": TOOLS,
                "tool_choice": {"type": "x"},
            },
            "tool_choice",
        ),
        ({"model": "sim-model", "max_tokens": 0, "messages": USER}, "max_tokens"),
    ],
)
def test_bad_bodies_are_400_in_anthropic_shape(client, body, needle):
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.post("/v1/messages", cast_to=object, body=body)
    assert (
        caught.value.body["type"] == "error" and caught.value.body["error"]["type"] == "invalid_request_error"
    )
    assert needle in caught.value.body["error"]["message"]


def test_unknown_model_is_not_found_error(client):
    with pytest.raises(anthropic.NotFoundError) as caught:
        client.messages.create(model="nobody", messages=USER, max_tokens=4)
    assert caught.value.body["error"]["type"] == "not_found_error"


def test_ground_truth_names_both_endpoints(module_sim_in_process, tmp_path):
    sim = module_sim_in_process(models=("sim-model",), log_path=tmp_path / "gt.parquet")
    client = anthropic.Anthropic(base_url=sim.url, api_key="unused", max_retries=0, timeout=20)
    client.messages.create(
        model="sim-model", messages=USER, max_tokens=4, extra_body=FORCED, extra_headers={"X-Request-Id": "m-1"},
        timeout=20,
    )  # fmt: skip
    with client.messages.stream(
        model="sim-model", messages=USER, max_tokens=6, extra_body=FORCED,
        extra_headers={"X-Request-Id": "m-2", "X-Sim-Reasoning-Tokens": "2"},
    ) as stream:  # fmt: skip
        stream.until_done()
    client.post(
        "/v1/responses", cast_to=object, options={"headers": {"X-Request-Id": "r-1"}},
        body={"model": "sim-model", "input": "Hi", "max_output_tokens": 3, "ignore_eos": True},
    )  # fmt: skip
    sim.stop()
    rows = {row["request_id"]: row for row in pq.read_table(sim.log_path).to_pylist()}
    assert {key: rows[key]["endpoint"] for key in rows} == {
        "m-1": "messages",
        "m-2": "messages",
        "r-1": "responses",
    }
    assert rows["m-1"]["completion_tokens"] == 4 and rows["m-1"]["finish_reason"] == "length"
    assert rows["m-2"]["reasoning_tokens"] == 2 and rows["m-2"]["stream"] and rows["m-2"]["outcome"] == "ok"
    assert rows["r-1"]["completion_tokens"] == 3 and rows["r-1"]["status"] == 200
