"""Failure injection seen by the official openai SDK: X-Sim-Fault, client disconnects, queue limit."""

from __future__ import annotations

import time
import urllib.request

import openai
import pyarrow.parquet as pq
import pytest


@pytest.fixture(scope="module")
def sim(module_sim_in_process):
    return module_sim_in_process()


@pytest.fixture(scope="module")
def client(sim):
    return openai.OpenAI(base_url=f"{sim.url}/v1", api_key="unused", max_retries=0, timeout=20)


MESSAGES = [{"role": "user", "content": "Tell me a story."}]


def stream(client, fault: str, tokens: int = 10, **extra):
    return client.chat.completions.create(
        model="sim-model", messages=MESSAGES, max_tokens=tokens, stream=True, extra_body={"ignore_eos": True},
        extra_headers={"X-Sim-Fault": fault}, **extra,
    )  # fmt: skip


def metric(sim, name: str) -> float:
    with urllib.request.urlopen(f"{sim.url}/metrics", timeout=5) as response:
        for line in response.read().decode().splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{"):
                return float(line.rsplit(" ", 1)[1])
    return 0.0


@pytest.mark.parametrize(
    "status, error", [("500", openai.InternalServerError), ("503", openai.APIStatusError)]
)
def test_server_errors(client, status, error):
    with pytest.raises(error) as info:
        client.chat.completions.create(
            model="sim-model", messages=MESSAGES, extra_headers={"X-Sim-Fault": status}
        )
    assert info.value.status_code == int(status) and info.value.body["type"] == "server_error"


def test_400_is_a_refusal_the_sdk_raises_as_bad_request(client):
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(
            model="sim-model", messages=MESSAGES, extra_headers={"X-Sim-Fault": "400"}
        )
    assert info.value.body["code"] == "context_length_exceeded"


def test_429_has_retry_after(client):
    with pytest.raises(openai.RateLimitError) as info:
        client.chat.completions.create(
            model="sim-model", messages=MESSAGES, extra_headers={"X-Sim-Fault": "429"}
        )
    assert info.value.response.headers["retry-after"] == "1"


def test_cut_aborts_the_connection_after_a_few_chunks(client):
    contents = []
    with pytest.raises(openai.APIConnectionError):
        for chunk in stream(client, "cut"):
            if chunk.choices and chunk.choices[0].delta.content:
                contents.append(chunk.choices[0].delta.content)
    assert len(contents) == 3


def test_truncate_ends_cleanly_without_finish_reason(client):
    chunks = list(stream(client, "truncate"))
    assert len([c for c in chunks if c.choices[0].delta.content]) == 3
    assert all(c.choices[0].finish_reason is None for c in chunks)


def test_stream_error_object_inside_a_200_stream(client):
    with pytest.raises(openai.APIError, match="simulated error inside the stream"):
        list(stream(client, "stream_error"))


def test_invalid_answer_is_not_openai(sim):
    request = urllib.request.Request(
        f"{sim.url}/v1/chat/completions", headers={"X-Sim-Fault": "invalid", "Content-Type": "application/json"},
        data=b'{"model": "sim-model", "messages": [{"role": "user", "content": "x"}]}',
    )  # fmt: skip
    with urllib.request.urlopen(request, timeout=5) as response:
        assert response.status == 200 and response.headers["Content-Type"].startswith("text/html")


def test_hang_makes_the_client_time_out(client):
    started = time.monotonic()
    with pytest.raises(openai.APITimeoutError):
        client.with_options(timeout=0.5).chat.completions.create(
            model="sim-model", messages=MESSAGES, extra_headers={"X-Sim-Fault": "hang"}
        )
    assert time.monotonic() - started < 5


def test_slow_first_token(client):
    started = time.perf_counter()
    for chunk in stream(client, "slow:400", tokens=2):
        if chunk.choices and chunk.choices[0].delta.content:
            break
    assert time.perf_counter() - started >= 0.4


def test_client_disconnect_frees_the_batch_slot(start_sim_in_process):
    sim = start_sim_in_process()  # its own: no request of another test still running or counted
    client = openai.OpenAI(base_url=f"{sim.url}/v1", api_key="unused", max_retries=0, timeout=20)
    before = metric(sim, 'sim:requests_total{outcome="cancelled_by_client"}')
    answer = client.chat.completions.create(
        model="sim-model", messages=MESSAGES, max_tokens=5000, stream=True, extra_body={"ignore_eos": True},
        extra_headers={"X-Request-Id": "walks-away"},
    )  # fmt: skip
    for n, _ in enumerate(answer):
        if n == 3:
            break
    assert metric(sim, "vllm:num_requests_running") == 1
    answer.close()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and metric(sim, "vllm:num_requests_running") != 0:
        time.sleep(0.05)
    assert metric(sim, "vllm:num_requests_running") == 0
    assert metric(sim, 'sim:requests_total{outcome="cancelled_by_client"}') == before + 1


@pytest.mark.e2e
def test_full_queue_answers_429_with_retry_after(module_sim):
    small = module_sim("--max-num-seqs", "1", "--max-waiting", "1", "--decode-base-ms", "20")
    client = openai.OpenAI(base_url=f"{small.url}/v1", api_key="unused", max_retries=0, timeout=20)
    first = client.chat.completions.create(
        model="sim-model", messages=MESSAGES, max_tokens=40, stream=True, extra_body={"ignore_eos": True}
    )
    next(iter(first))  # the opening chunk: this one is admitted (running)
    second = client.with_options(timeout=20).chat.completions.create(
        model="sim-model", messages=MESSAGES, max_tokens=1, stream=True
    )
    next(iter(second))  # waiting in the queue
    with pytest.raises(openai.RateLimitError) as info:
        client.chat.completions.create(model="sim-model", messages=MESSAGES, max_tokens=1)
    assert info.value.body["code"] == "queue_full" and info.value.response.headers["retry-after"] == "1"
    assert len(list(first)) > 0 and len(list(second)) > 0
    assert small.stop() == 0
    outcomes = pq.read_table(small.log_path).column("outcome").to_pylist()
    assert sorted(outcomes) == ["error_429", "ok", "ok"]
