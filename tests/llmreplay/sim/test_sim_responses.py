"""The official openai SDK's `client.responses` against a real sim (in this process): text, tools,
reasoning, forced lengths, cached prefixes, a chained session, faults and bad bodies."""

from __future__ import annotations

import json

import openai
import pytest

from llmreplay.tokenizers import load_tokenizer

INSTRUCTIONS = "Be brief and answer in plain words."
STORY = "Tell me a long story about a lighthouse keeper who finds a message in a bottle on the shore."
TOOLS = [
    {
        "type": "function",
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    }
]
FORCED = {"ignore_eos": True}


@pytest.fixture(scope="module")
def client(module_sim_in_process):
    sim = module_sim_in_process(models=("sim-model",), block_size=16)
    return openai.OpenAI(base_url=f"{sim.url}/v1", api_key="unused", max_retries=0, timeout=20)


@pytest.fixture(scope="module")
def count():
    return load_tokenizer().count


def test_non_stream_forced_length_is_incomplete_at_max_output_tokens(client, count):
    answer = client.responses.create(
        model="sim-model", instructions=INSTRUCTIONS, input="Name three colours.", max_output_tokens=7,
        extra_body=FORCED,
    )  # fmt: skip
    assert answer.object == "response" and answer.id.startswith("resp_") and answer.model == "sim-model"
    assert answer.status == "incomplete" and answer.incomplete_details.reason == "max_output_tokens"
    assert answer.usage.output_tokens == 7 and len(answer.output_text.split()) == 7
    assert answer.usage.input_tokens == count(INSTRUCTIONS) + count("Name three colours.")
    assert answer.usage.total_tokens == answer.usage.input_tokens + 7
    assert answer.output[0].type == "message" and answer.output[0].role == "assistant"


def test_stream_follows_the_grammar(client):
    events = list(
        client.responses.create(
            model="sim-model", input="Hi", max_output_tokens=5, stream=True, extra_body=FORCED
        )
    )
    kinds = [event.type for event in events]
    assert kinds == [
        "response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
        *["response.output_text.delta"] * 5, "response.output_text.done", "response.content_part.done",
        "response.output_item.done", "response.incomplete",
    ]  # fmt: skip
    assert [event.sequence_number for event in events] == list(range(1, len(events) + 1))
    deltas = "".join(event.delta for event in events if event.type == "response.output_text.delta")
    assert events[-4].text == deltas and events[-1].response.output_text == deltas
    assert events[0].response.id == events[-1].response.id and events[0].response.status == "in_progress"
    assert events[-1].response.usage.output_tokens == 5


def test_unforced_answer_completes(client):
    answer = client.responses.create(model="sim-model", input="Hi", max_output_tokens=2000)
    assert answer.status == "completed" and answer.incomplete_details is None
    assert 1 <= answer.usage.output_tokens < 2000


def test_tool_call_streamed_and_not(client):
    body = {"model": "sim-model", "input": "Weather in Paris?", "tools": TOOLS, "max_output_tokens": 6}
    answer = client.responses.create(**body, extra_body=FORCED)
    call = answer.output[0]
    assert answer.status == "completed" and call.type == "function_call" and call.name == "get_weather"
    assert isinstance(json.loads(call.arguments), dict) and call.call_id.startswith("call_")
    events = list(client.responses.create(**body, stream=True, extra_body=FORCED))
    deltas = [event.delta for event in events if event.type == "response.function_call_arguments.delta"]
    done = next(event for event in events if event.type == "response.function_call_arguments.done")
    assert (
        len(deltas) == 6
        and "".join(deltas) == done.arguments
        and isinstance(json.loads(done.arguments), dict)
    )
    # after the tool's output the model answers in words
    follow_up = [{"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}]
    answer = client.responses.create(model="sim-model", input=follow_up, tools=TOOLS, max_output_tokens=4)
    assert answer.output[0].type == "message"


def test_reasoning_item_first(client):
    events = list(
        client.responses.create(
            model="sim-model", input="Think first.", max_output_tokens=8, stream=True, extra_body=FORCED,
            extra_headers={"X-Sim-Reasoning-Tokens": "3"},
        )
    )  # fmt: skip
    reasoning = [event.delta for event in events if event.type == "response.reasoning_text.delta"]
    text = [event.delta for event in events if event.type == "response.output_text.delta"]
    assert len(reasoning) == 3 and len(text) == 5
    final = events[-1].response
    assert [item.type for item in final.output] == ["reasoning", "message"]
    assert final.output[0].content[0].text == "".join(reasoning)
    assert final.usage.output_tokens == 8 and final.usage.output_tokens_details.reasoning_tokens == 3


def test_repeated_prefix_is_cached(client, count):
    first = client.responses.create(
        model="sim-model", input=STORY * 3, max_output_tokens=2, extra_body=FORCED
    )
    again = client.responses.create(
        model="sim-model", input=STORY * 3, max_output_tokens=2, extra_body=FORCED
    )
    assert first.usage.input_tokens == again.usage.input_tokens == count(STORY * 3) > 32
    assert first.usage.input_tokens_details.cached_tokens == 0
    cached = again.usage.input_tokens_details.cached_tokens
    assert cached % 16 == 0 and first.usage.input_tokens - 16 <= cached < first.usage.input_tokens


def test_chained_session_grows_by_its_history(client, count):
    """Each turn's prompt = the previous conversation (without its instructions) + the new input."""
    turn = client.responses.create(
        model="sim-model", instructions=INSTRUCTIONS, input=STORY, max_output_tokens=6, extra_body=FORCED
    )
    prompts, history = [turn.usage.input_tokens], turn.usage.input_tokens - count(INSTRUCTIONS) + 6
    for question, stream in (("And then what happened?", False), ("How does it end?", True)):
        body = {"model": "sim-model", "instructions": INSTRUCTIONS, "previous_response_id": turn.id,
                "input": [{"role": "user", "content": question}], "max_output_tokens": 6, "extra_body": FORCED}  # fmt: skip
        if stream:
            events = list(client.responses.create(**body, stream=True))
            assert events[0].response.id == events[-1].response.id
            turn = events[-1].response
        else:
            turn = client.responses.create(**body)
        assert turn.usage.input_tokens == count(INSTRUCTIONS) + history + count(question)
        assert (
            turn.usage.input_tokens_details.cached_tokens >= prompts[-1] - 16
        )  # the prefix is the last prompt
        prompts.append(turn.usage.input_tokens)
        history += count(question) + 6
    assert prompts[0] < prompts[1] < prompts[2]


def test_unknown_or_unstored_previous_response_is_404(client):
    with pytest.raises(openai.NotFoundError) as caught:
        client.responses.create(model="sim-model", input="Hi", previous_response_id="resp_nobody")
    assert caught.value.body["code"] == "previous_response_not_found"
    assert caught.value.body["param"] == "previous_response_id"
    unstored = client.responses.create(model="sim-model", input="Hi", store=False, max_output_tokens=3)
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="sim-model", input="Hi", previous_response_id=unstored.id)


@pytest.mark.parametrize(
    ("fault", "error"),
    [
        ("500", openai.InternalServerError),
        ("503", openai.InternalServerError),
        ("429", openai.RateLimitError),
    ],
)
def test_immediate_faults_in_openai_shape(client, fault, error):
    with pytest.raises(error) as caught:
        client.responses.create(model="sim-model", input="Hi", extra_headers={"X-Sim-Fault": fault})
    assert set(caught.value.body) == {"message", "type", "param", "code"}


def test_stream_error_is_an_error_event(client):
    events = list(
        client.responses.create(
            model="sim-model", input="Hi", max_output_tokens=8, stream=True, extra_body=FORCED,
            extra_headers={"X-Sim-Fault": "stream_error"},
        )
    )  # fmt: skip
    assert [event.type for event in events].count("response.output_text.delta") == 3
    assert events[-1].type == "error" and events[-1].code == "server_error"


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": "sim-model"}, "input"),
        ({"model": "sim-model", "input": []}, "input"),
        ({"model": "sim-model", "input": "Hi", "max_output_tokens": 0}, "max_output_tokens"),
        ({"model": "sim-model", "input": "Hi", "tools": [{"name": "f"}]}, "tools"),
        ({"model": "sim-model", "input": "Hi", "conversation": "conv_1"}, "conversation"),
    ],
)
def test_bad_bodies_are_400_in_openai_shape(client, body, param):
    with pytest.raises(openai.BadRequestError) as caught:
        client.post("/responses", cast_to=object, body=body)
    assert caught.value.body["param"] == param and caught.value.body["type"] == "invalid_request_error"
