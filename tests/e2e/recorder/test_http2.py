"""End to end over HTTP/2: a TLS client negotiating ALPN h2 with `llmreplay record`, streaming from a real sim.

Issue 5 asks for untouched streaming to HTTP/2 clients too; mitmproxy terminates TLS with its own CA
(created in --confdir on first start) and forwards to the HTTP/1.1 sim.
"""

from __future__ import annotations

import json
import socket
import ssl
import threading
import time
from pathlib import Path

import h2.config
import h2.connection
import h2.errors
import h2.events
import httpx2
import pytest

from llmreplay.trace_io import read_trace
from recorder.keys import keyed_hash, load_or_create_key
from tests.e2e.recorder.test_recorder import API_KEY, start_recorder, stop

pytestmark = pytest.mark.e2e  # every test here starts processes

MAX_TOKENS = 60  # at the slow profile (about 10 ms a step) the stream lasts about 0.6 s


def request(user: str, max_tokens: int = MAX_TOKENS) -> dict:
    return {
        "model": "sim-model",
        "messages": [{"role": "user", "content": "Tell me about the sea, over HTTP/2."}],
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": max_tokens,
        "ignore_eos": True,  # the sim then answers exactly max_tokens tokens
        "user": user,
    }


HEADERS = {"Authorization": f"Bearer {API_KEY}"}


def timed_stream(client: httpx2.Client, url: str, body: dict) -> tuple[str, bytes, list[tuple[int, bytes]]]:
    """POSTs a streaming request; returns the HTTP version, the raw body and (arrival ns, piece) pairs."""
    pieces: list[tuple[int, bytes]] = []
    with client.stream("POST", url, json=body, headers=HEADERS) as response:
        assert response.status_code == 200, response.read()
        for piece in response.iter_raw():
            pieces.append((time.perf_counter_ns(), piece))
        return response.http_version, b"".join(p for _, p in pieces), pieces


def events(body: bytes) -> list[dict | str]:
    """The SSE data payloads, minus what differs between two identical requests (id, created)."""
    assert body.endswith(b"\n\n"), body[-80:]
    decoded: list[dict | str] = []
    for block in body.decode().split("\n\n")[:-1]:
        assert block.startswith("data: "), block
        data = block.removeprefix("data: ")
        if data == "[DONE]":
            decoded.append(data)
            continue
        obj = json.loads(data)
        obj.pop("id"), obj.pop("created")
        decoded.append(obj)
    return decoded


def multiplexed(client: httpx2.Client, url: str, users: list[str]) -> dict[str, tuple]:
    """Streams one request per user at once over the client's single HTTP/2 connection; per user
    (local port of the connection, body length) or the exception."""
    results: dict[str, tuple] = {}

    def one(user: str) -> None:
        try:
            with client.stream("POST", url, json=request(user, 40), headers=HEADERS) as response:
                port = response.extensions["network_stream"].get_extra_info("client_addr")[1]
                results[user] = (port, len(events(response.read())))
        except Exception as exc:  # noqa: BLE001 - reported by the caller's assertion
            results[user] = (repr(exc),)

    threads = [threading.Thread(target=one, args=(user,)) for user in users]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return results


def hang_up_mid_stream(tls_base: str, ssl_context: ssl.SSLContext) -> int:
    """Reads a few pieces of a long stream, then closes the HTTP/2 connection; returns pieces read."""
    client = httpx2.Client(http2=True, http1=False, verify=ssl_context, timeout=30)
    read = 0
    with client.stream(
        "POST", f"{tls_base}/v1/chat/completions", json=request("h2-hang-up", 400), headers=HEADERS
    ) as response:
        for read, _ in enumerate(response.iter_raw(), start=1):
            if read == 3:
                break
        client.close()  # the TCP connection goes; the stream had about 4 s left
    return read


def reset_stream_mid_way(tls_base: str, ca_file: Path) -> tuple[list[str], int]:
    """A raw h2 client, as browsers and Java's HttpClient are: no content-length on the POST; it
    cancels its first stream (RST_STREAM CANCEL) after a few DATA frames, then sends a second request
    on the same connection. Returns both statuses and the second stream's DATA bytes."""
    host, port = tls_base.removeprefix("https://").split(":")
    ssl_context = ssl.create_default_context(cafile=ca_file)
    ssl_context.set_alpn_protocols(["h2"])
    raw = socket.create_connection((host, int(port)), timeout=10)
    with ssl_context.wrap_socket(raw, server_hostname=host) as sock:
        assert sock.selected_alpn_protocol() == "h2"
        conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        conn.initiate_connection()
        statuses: list[str] = []
        data_bytes = {1: 0, 3: 0}

        def post(stream_id: int, body: dict) -> None:
            headers = [(":method", "POST"), (":scheme", "https"), (":authority", f"{host}:{port}")]
            headers += [(":path", "/v1/chat/completions"), ("content-type", "application/json")]
            conn.send_headers(stream_id, headers + [(k.lower(), v) for k, v in HEADERS.items()])
            conn.send_data(stream_id, json.dumps(body).encode(), end_stream=True)
            sock.sendall(conn.data_to_send())

        def read_until(done) -> None:
            for _ in range(2000):  # bounded; each recv waits at most the socket timeout
                for event in conn.receive_data(sock.recv(65536)):
                    if isinstance(event, h2.events.ResponseReceived):
                        statuses.append(dict(event.headers)[b":status"].decode())
                        assert statuses[-1] == "200", statuses  # 400: the sim got an empty body
                    elif isinstance(event, h2.events.DataReceived):
                        data_bytes[event.stream_id] += len(event.data)
                        conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                    if done(event):
                        sock.sendall(conn.data_to_send())
                        return
                sock.sendall(conn.data_to_send())  # SETTINGS acknowledgements, window updates
            raise AssertionError("the stream did not progress")

        post(1, request("h2-reset", 400))  # 400 tokens: about 4 s; the reset comes after 3 frames
        frames = iter(range(3))
        read_until(lambda e: isinstance(e, h2.events.DataReceived) and next(frames, None) is None)
        conn.reset_stream(1, h2.errors.ErrorCodes.CANCEL)
        post(3, request("h2-after-reset", 5))
        read_until(lambda e: isinstance(e, h2.events.StreamEnded) and e.stream_id == 3)
        conn.close_connection()
        sock.sendall(conn.data_to_send())
    return statuses, data_bytes[3]


def test_http2_tls_client_streams_through_the_recorder(processes, start_sim, tmp_path):
    sim = start_sim("--profile", "slow")
    out = tmp_path / "trace"
    base, proc = start_recorder(processes, tmp_path, sim, out)
    tls_base = base.replace("http://", "https://")  # same port: mitmproxy detects the ClientHello
    ca_file = tmp_path / "mitmproxy" / "mitmproxy-ca-cert.pem"  # created by the recorder on start
    assert ca_file.is_file()
    ssl_context = ssl.create_default_context(cafile=ca_file)  # verifies the proxy's certificate

    with httpx2.Client(http2=True, http1=False, verify=ssl_context, timeout=30) as h2:
        sent_ns = time.perf_counter_ns()
        version, via_h2, pieces = timed_stream(h2, f"{tls_base}/v1/chat/completions", request("h2-client"))
        mux = multiplexed(h2, f"{tls_base}/v1/chat/completions", ["h2-mux-0", "h2-mux-1"])
    with httpx2.Client(timeout=30) as h1:
        direct_version, direct, _ = timed_stream(h1, f"{sim}/v1/chat/completions", request("h2-client"))

    assert version == "HTTP/2" and direct_version == "HTTP/1.1"
    assert events(via_h2) == events(direct)
    contents = [e for e in events(via_h2) if e != "[DONE]" and e["choices"] and e["choices"][0]["delta"]]
    assert len(contents) >= MAX_TOKENS

    # incremental: many DATA frames, and the first token long before the last (not one buffered body)
    first_content_ns = next(at for at, piece in pieces if b'"content":"' in piece)
    last_ns = pieces[-1][0]
    assert len(pieces) >= MAX_TOKENS // 4, len(pieces)
    assert last_ns - first_content_ns >= (last_ns - sent_ns) // 2, (first_content_ns, last_ns, sent_ns)

    # two streams at once on one connection: 40 content events + role, finish, usage, [DONE] each
    assert len({result[0] for result in mux.values()}) == 1, mux
    assert [result[1:] for result in mux.values()] == [(44,), (44,)], mux

    assert hang_up_mid_stream(tls_base, ssl_context) == 3
    statuses, after_reset_bytes = reset_stream_mid_way(tls_base, ca_file)
    assert statuses == ["200", "200"] and after_reset_bytes > 0

    stop(proc)
    assert proc.returncode == 0
    key = load_or_create_key(tmp_path / "recorder.key")
    rows = read_trace(out).table.to_pylist()
    users = ["h2-client", "h2-mux-0", "h2-mux-1", "h2-hang-up", "h2-reset", "h2-after-reset"]
    assert sorted(r["user_id"] for r in rows) == sorted(keyed_hash(key, user, "u") for user in users)
    by_user = {user: next(r for r in rows if r["user_id"] == keyed_hash(key, user, "u")) for user in users}

    row = by_user["h2-client"]
    assert row["stream"] is True and row["error_kind"] is None and row["http_status"] == 200
    assert row["completion_tokens"] == MAX_TOKENS and row["token_source"] == "server_usage"
    assert len(row["chunk_offsets_ns"]) == MAX_TOKENS
    assert row["chunk_offsets_ns"] == sorted(row["chunk_offsets_ns"])
    assert 0 < row["ttft_ns"] == row["chunk_offsets_ns"][0] <= row["e2e_ns"]
    assert row["chunk_offsets_ns"][-1] - row["ttft_ns"] >= 200_000_000  # the slow profile spreads the tokens

    for user, tokens in (("h2-mux-0", 40), ("h2-mux-1", 40), ("h2-after-reset", 5)):
        row = by_user[user]
        assert (row["error_kind"], row["completion_tokens"], len(row["chunk_offsets_ns"])) == (
            None,
            tokens,
            tokens,
        )

    for user in ("h2-hang-up", "h2-reset"):
        row = by_user[user]
        assert row["stream"] is True and row["error_kind"] == "client_disconnected", (user, row["error_kind"])
        assert row["ttft_ns"] is not None and len(row["chunk_offsets_ns"]) < 400
