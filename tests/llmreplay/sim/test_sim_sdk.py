"""The official openai SDK against a real sim (in this process): chat, completions, tools, errors."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import openai
import pytest

from llmreplay.tokenizers import load_tokenizer


@pytest.fixture(scope="module")
def sim(module_sim_in_process):
    return module_sim_in_process(models=("sim-model", "other-model"))


@pytest.fixture(scope="module")
def client(sim):
    return openai.OpenAI(base_url=f"{sim.url}/v1", api_key="unused", max_retries=0, timeout=20)


MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name three colours."}]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]


def test_chat_non_stream(client):
    answer = client.chat.completions.create(
        model="sim-model", messages=MESSAGES, max_tokens=7, extra_body={"ignore_eos": True}
    )
    assert answer.object == "chat.completion" and answer.model == "sim-model"
    assert answer.choices[0].finish_reason == "length" and answer.choices[0].message.role == "assistant"
    assert answer.usage.completion_tokens == 7 and len(answer.choices[0].message.content.split()) == 7
    tokenizer = load_tokenizer()
    assert answer.usage.prompt_tokens == sum(tokenizer.count(m["content"]) for m in MESSAGES)
    assert answer.usage.prompt_tokens_details.cached_tokens == 0


def test_chat_stream_with_usage(client):
    stream = client.chat.completions.create(
        model="other-model", messages=MESSAGES, max_completion_tokens=5, stream=True,
        stream_options={"include_usage": True}, extra_body={"min_tokens": 5},
    )  # fmt: skip
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant" and chunks[0].choices[0].delta.content == ""
    contents = [c.choices[0].delta.content for c in chunks[1:] if c.choices and c.choices[0].delta.content]
    assert len(contents) == 5
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 5
    assert chunks[-1].usage.total_tokens == chunks[-1].usage.prompt_tokens + 5
    assert {c.model for c in chunks} == {"other-model"} and len({c.id for c in chunks}) == 1


def test_unforced_output_is_drawn_and_capped(client):
    answers = [
        client.chat.completions.create(model="sim-model", messages=MESSAGES, max_tokens=20, extra_headers={"X-Request-Id": f"draw-{i}"})
        for i in range(6)
    ]  # fmt: skip
    for answer in answers:
        tokens, reason = answer.usage.completion_tokens, answer.choices[0].finish_reason
        assert 1 <= tokens <= 20 and reason == ("length" if tokens == 20 else "stop")


def test_completions_stream_and_not(client):
    answer = client.completions.create(
        model="sim-model", prompt="Once upon a time", max_tokens=4, extra_body={"ignore_eos": True}
    )
    assert answer.object == "text_completion" and answer.usage.completion_tokens == 4
    assert answer.choices[0].text == " the of and to"
    chunks = list(
        client.completions.create(
            model="sim-model", prompt="Once upon a time", max_tokens=4, stream=True,
            stream_options={"include_usage": True}, extra_body={"ignore_eos": True},
        )
    )  # fmt: skip
    assert "".join(c.choices[0].text for c in chunks if c.choices) == answer.choices[0].text
    assert (
        chunks[-1].usage.completion_tokens == 4
        and chunks[-1].usage.prompt_tokens == answer.usage.prompt_tokens
    )


def test_tool_call_non_stream(client):
    answer = client.chat.completions.create(
        model="sim-model", messages=[{"role": "user", "content": "Weather in Oslo?"}], tools=TOOLS,
        tool_choice="required", max_tokens=6, extra_body={"ignore_eos": True},
    )  # fmt: skip
    choice = answer.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    call = choice.message.tool_calls[0]
    assert call.function.name == "get_weather" and isinstance(json.loads(call.function.arguments), dict)
    assert answer.usage.completion_tokens == 6


def test_tool_call_stream_then_text_after_the_tool_result(client):
    stream = client.chat.completions.create(
        model="sim-model", messages=[{"role": "user", "content": "Weather in Oslo?"}], tools=TOOLS,
        max_tokens=4, extra_body={"ignore_eos": True}, stream=True,
    )  # fmt: skip
    deltas = [c.choices[0].delta for c in stream if c.choices]
    calls = [d.tool_calls[0] for d in deltas if d.tool_calls]
    assert len(calls) == 4 and calls[0].function.name == "get_weather" and calls[0].id.startswith("call_")
    assert json.loads("".join(c.function.arguments for c in calls)) == {"input": " the of"}
    history = [
        {"role": "user", "content": "Weather in Oslo?"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": calls[0].id, "type": "function",
         "function": {"name": "get_weather", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": calls[0].id, "content": "sunny"},
    ]  # fmt: skip
    answer = client.chat.completions.create(model="sim-model", messages=history, tools=TOOLS, max_tokens=3)
    assert answer.choices[0].message.tool_calls is None and answer.choices[0].message.content


def test_prefix_cache_hit_is_reported(client):
    long_system = {"role": "system", "content": " ".join(f"rule {i} says something." for i in range(400))}
    first = client.chat.completions.create(
        model="sim-model", messages=[long_system, {"role": "user", "content": "a"}], max_tokens=1
    )
    second = client.chat.completions.create(
        model="sim-model", messages=[long_system, {"role": "user", "content": "b"}], max_tokens=1
    )
    assert first.usage.prompt_tokens > 1024
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    cached = second.usage.prompt_tokens_details.cached_tokens
    assert cached > 0 and cached % 512 == 0 and cached <= second.usage.prompt_tokens


def test_unknown_model_is_404_model_not_found(client):
    with pytest.raises(openai.NotFoundError) as info:
        client.chat.completions.create(model="gpt-nothing", messages=MESSAGES)
    assert info.value.body["code"] == "model_not_found"


def post(sim, path: str, raw: bytes) -> tuple[int, dict]:
    request = urllib.request.Request(
        f"{sim.url}{path}", data=raw, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@pytest.mark.parametrize(
    "path, raw",
    [
        ("/v1/chat/completions", b"{broken"),
        ("/v1/chat/completions", b'{"model": "sim-model"}'),
        ("/v1/chat/completions", b'{"model": "sim-model", "messages": "hello"}'),
        ("/v1/completions", b'{"model": "sim-model", "prompt": {"a": 1}}'),
        ("/v1/completions", b'{"model": "sim-model", "prompt": "x", "max_tokens": -3}'),
    ],
)
def test_bad_bodies_get_openai_400_and_the_sim_keeps_serving(sim, client, path, raw):
    status, body = post(sim, path, raw)
    assert status == 400
    assert (
        set(body["error"]) >= {"message", "type", "code"} and body["error"]["type"] == "invalid_request_error"
    )
    assert (
        client.completions.create(
            model="sim-model", prompt="still there?", max_tokens=1
        ).usage.completion_tokens
        == 1
    )


def test_models_and_metrics(sim, client):
    assert [m.id for m in client.models.list()] == ["sim-model", "other-model"]
    with urllib.request.urlopen(f"{sim.url}/metrics", timeout=5) as response:
        text = response.read().decode()
    values = {
        line.split()[0]: float(line.split()[1]) for line in text.splitlines() if not line.startswith("#")
    }
    for name in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"):
        assert f'{name}{{model_name="sim-model"}}' in values
    assert values['vllm:generation_tokens_total{model_name="sim-model"}'] > 0
    assert values['vllm:prefix_cache_hits_total{model_name="sim-model"}'] > 0
    assert (
        values['sim:requests_total{outcome="ok"}'] > 0
        and values['sim:requests_total{outcome="error_404"}'] >= 1
    )
