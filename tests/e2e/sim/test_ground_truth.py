"""The ground-truth log agrees with what the openai SDK saw, and appears atomically on SIGTERM."""

from __future__ import annotations

import time

import openai
import pyarrow.parquet as pq
import pytest

from llmreplay.sim.ground_truth import REQUEST_COLUMNS, STEP_COLUMNS

pytestmark = pytest.mark.e2e  # every test here starts processes


def test_log_matches_the_client_view(module_sim):
    sim = module_sim("--output-len-median-tokens", "6")
    client = openai.OpenAI(base_url=f"{sim.url}/v1", api_key="unused", max_retries=0, timeout=20)
    seen: dict[str, dict] = {}  # request id -> what the client observed

    def chat_stream(request_id: str, tokens: int | None):
        sent_ns = time.perf_counter_ns()
        chunks = client.chat.completions.create(
            model="sim-model", messages=[{"role": "user", "content": f"question {request_id}"}], max_tokens=tokens,
            stream=True, stream_options={"include_usage": True}, extra_headers={"X-Request-Id": request_id},
        )  # fmt: skip
        first_content_ns = None
        for chunk in chunks:
            if first_content_ns is None and chunk.choices and chunk.choices[0].delta.content:
                first_content_ns = time.perf_counter_ns()
            if chunk.usage:
                usage = chunk.usage
        seen[request_id] = {
            "sent_ns": sent_ns, "first_content_ns": first_content_ns, "done_ns": time.perf_counter_ns(),
            "prompt": usage.prompt_tokens, "completion": usage.completion_tokens, "outcome": "ok", "stream": True,
        }  # fmt: skip

    def completion(request_id: str, tokens: int):
        sent_ns = time.perf_counter_ns()
        answer = client.completions.create(
            model="sim-model", prompt=f"prompt {request_id}", max_tokens=tokens,
            extra_headers={"X-Request-Id": request_id}, extra_body={"ignore_eos": True},
        )  # fmt: skip
        seen[request_id] = {
            "sent_ns": sent_ns, "first_content_ns": None, "done_ns": time.perf_counter_ns(),
            "prompt": answer.usage.prompt_tokens, "completion": answer.usage.completion_tokens,
            "outcome": "ok", "stream": False,
        }  # fmt: skip

    for i in range(6):
        chat_stream(f"stream-{i}", 4 + i)
    chat_stream("drawn", None)
    for i in range(3):
        completion(f"plain-{i}", 3 + i)
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(
            model="missing",
            messages=[{"role": "user", "content": "x"}],
            extra_headers={"X-Request-Id": "lost"},
        )
    with pytest.raises(openai.APIConnectionError):
        list(
            client.chat.completions.create(
                model="sim-model", messages=[{"role": "user", "content": "x"}], max_tokens=9, stream=True,
                extra_headers={"X-Request-Id": "cut", "X-Sim-Fault": "cut"}, extra_body={"ignore_eos": True},
            )
        )  # fmt: skip

    assert sim.stop() == 0
    leftovers = [p.name for p in sim.log_path.parent.iterdir() if ".tmp-" in p.name]
    assert leftovers == []
    table = pq.read_table(sim.log_path)
    assert table.column_names == [name for name, _, _ in REQUEST_COLUMNS]
    rows = {row["request_id"]: row for row in table.to_pylist()}
    assert len(rows) == table.num_rows == len(seen) + 2
    for request_id, client_view in seen.items():
        row = rows[request_id]
        assert (row["prompt_tokens"], row["completion_tokens"]) == (
            client_view["prompt"],
            client_view["completion"],
        )
        assert (row["outcome"], row["status"], row["stream"]) == ("ok", 200, client_view["stream"])
        # one machine clock: the sim saw the request after it was sent and wrote tokens before they arrived
        assert client_view["sent_ns"] <= row["arrival_mono_ns"] <= row["admitted_mono_ns"]
        assert row["admitted_mono_ns"] <= row["first_token_mono_ns"] <= row["last_token_mono_ns"]
        assert row["last_token_mono_ns"] <= client_view["done_ns"]
        assert row["queue_ns"] == row["admitted_mono_ns"] - row["arrival_mono_ns"]
        if client_view["first_content_ns"] is not None:
            assert row["first_token_mono_ns"] <= client_view["first_content_ns"]
    assert (rows["lost"]["status"], rows["lost"]["outcome"], rows["lost"]["model"]) == (
        404,
        "error_404",
        "missing",
    )
    assert (rows["cut"]["outcome"], rows["cut"]["completion_tokens"], rows["cut"]["fault"]) == (
        "cut",
        3,
        "cut",
    )
    assert abs(rows["stream-0"]["arrival_unix_ns"] / 1e9 - time.time()) < 120
    steps = pq.read_table(sim.log_path.with_name("gt.steps.parquet"))
    assert steps.column_names == [name for name, _, _ in STEP_COLUMNS]
    assert steps.num_rows > 0 and sum(steps.column("batch_size").to_pylist()) >= sum(
        view["completion"] for view in seen.values()
    )


def test_sigterm_with_requests_in_flight_still_publishes_the_log(module_sim):
    sim = module_sim()
    client = openai.OpenAI(base_url=f"{sim.url}/v1", api_key="unused", max_retries=0, timeout=20)
    long_stream = client.chat.completions.create(
        model="sim-model", messages=[{"role": "user", "content": "go on"}], max_tokens=100_000, stream=True,
        extra_headers={"X-Request-Id": "endless"}, extra_body={"ignore_eos": True},
    )  # fmt: skip
    received = iter(long_stream)
    for _ in range(3):
        next(received)
    started = time.monotonic()
    assert sim.stop() == 0
    assert time.monotonic() - started < 10
    finish_reasons = []
    try:  # the stream stops short: it ends (or breaks) without a finish reason
        finish_reasons = [chunk.choices[0].finish_reason for chunk in received if chunk.choices]
    except openai.APIError:
        pass
    assert set(finish_reasons) <= {None}
    rows = pq.read_table(sim.log_path).to_pylist()
    assert [(r["request_id"], r["outcome"]) for r in rows] == [("endless", "shutdown")]
    assert rows[0]["completion_tokens"] >= 2  # the first 3 chunks were the opening and 2 tokens


def test_arrival_is_the_read_of_the_first_bytes_and_never_an_earlier_requests(module_sim):
    """A request whose head arrives in two parts 300 ms apart arrived with the first part (that is
    when the client sent it); a GET on the same connection before a POST lends the POST no stamp."""
    import json
    import socket
    from urllib.parse import urlsplit

    sim = module_sim("--output-len-median-tokens", "2")
    address = urlsplit(sim.url)
    body = json.dumps(
        {"model": "sim-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    )

    def post(request_id: str) -> bytes:
        return (
            f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Request-Id: {request_id}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n{body}"
        ).encode()

    def read_answer(sock: socket.socket) -> None:
        data = b""
        while b"\r\n\r\n" not in data:
            data += sock.recv(65536)
        head, rest = data.split(b"\r\n\r\n", 1)
        length = int(
            next(
                line.split(b":")[1]
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length")
            )
        )
        while len(rest) < length:
            rest += sock.recv(65536)

    with socket.create_connection((address.hostname, address.port), timeout=10) as sock:
        split = post("split")
        first_ns = time.perf_counter_ns()
        sock.sendall(split[:30])
        time.sleep(0.3)
        sock.sendall(split[30:])
        read_answer(sock)
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        read_answer(sock)
        time.sleep(0.3)
        after_get_ns = time.perf_counter_ns()
        sock.sendall(post("after-get"))
        read_answer(sock)
    assert sim.stop() == 0
    rows = {row["request_id"]: row for row in pq.read_table(sim.log_path).to_pylist()}
    assert first_ns <= rows["split"]["arrival_mono_ns"] <= first_ns + 100_000_000  # not 300 ms later
    assert after_get_ns <= rows["after-get"]["arrival_mono_ns"] <= after_get_ns + 100_000_000
