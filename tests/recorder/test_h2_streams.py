"""HTTP/2 hang-ups on multiplexed connections: one row per request, with the outcome the client had.

A real `llmreplay record` in front of a real, fast `llmreplay sim`, TLS clients negotiating h2. mitmproxy
runs the `response` hook before it ends the client's stream, and a client reset or a lost connection after
that hook reaches no hook at all (recorder/h2_streams.py has the details), so these rows used to say
success. httpx never resets a stream it stops reading (httpcore just discards what follows), so its
RST_STREAM is sent through its h2 state here, as browsers, curl or Go would send one; it cannot shrink its
flow-control windows either (16 MiB a stream), so the cases where mitmproxy holds the end of a stream in
its send buffer use a raw h2 client with a 2 KiB window.
"""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import time
from pathlib import Path

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.settings
import httpx2
import pytest
from hyperframe.frame import RstStreamFrame
from mitmproxy.proxy.layers.http._http2 import Http2Server
from mitmproxy.proxy.layers.http._http_h2 import BufferedH2Connection

from llmreplay.trace_io import read_trace
from llmreplay.wire.response import summarize_stream
from recorder import h2_streams
from recorder.capture import Capture, keep_delivered
from recorder.keys import keyed_hash, load_or_create_key
from recorder.record_builder import classify_error
from recorder.request_shape import RequestShape
from tests.e2e.recorder.test_http2 import request
from tests.e2e.recorder.test_recorder import API_KEY, start_recorder, stop

HEADERS = {"Authorization": f"Bearer {API_KEY}"}
FAST_SIM = ("--decode-base-ms", "2", "--decode-per-seq-ms", "0")  # a token every 2 ms per stream
URL_PATH = "/v1/chat/completions"
DEADLINE_S = 20  # every client loop below gives up after this


def content_events(body: bytes) -> int:
    """SSE events with a content delta in what the client got (a last unterminated one counts if whole,
    as the recorder's parser flushes it at the end of the body)."""
    count = 0
    for block in body.split(b"\n\n"):
        if not block.startswith(b"data: {"):
            continue
        try:
            event = json.loads(block[6:])
        except ValueError:
            continue  # cut inside the event
        if event.get("choices") and event["choices"][0].get("delta", {}).get("content"):
            count += 1
    return count


def rows_by_user(tmp_path: Path, out: Path, users) -> dict[str, dict]:
    key = load_or_create_key(tmp_path / "recorder.key")
    rows = read_trace(out).table.to_pylist()
    hashed = {keyed_hash(key, user, "u"): user for user in users}
    assert sorted(hashed.get(r["user_id"], r["user_id"]) for r in rows) == sorted(users)  # rows == requests
    return {hashed[r["user_id"]]: r for r in rows}


def start(processes, start_sim, tmp_path):
    sim = start_sim(*FAST_SIM)
    out = tmp_path / "trace"
    base, proc = start_recorder(processes, tmp_path, sim, out)
    ca_file = tmp_path / "mitmproxy" / "mitmproxy-ca-cert.pem"
    return base.replace("http://", "https://"), ca_file, out, proc


# -- httpx over HTTP/2 -------------------------------------------------------------------------


async def reset_stream(client: httpx2.AsyncClient, response: httpx2.Response) -> None:
    """RST_STREAM(CANCEL) for this response's stream, through the client's own h2 state."""
    [pooled] = client._transport._pool.connections
    connection = pooled._connection
    async with connection._write_lock:
        connection._h2_state.reset_stream(response.extensions["stream_id"], h2.errors.ErrorCodes.CANCEL)
        await connection._network_stream.write(connection._h2_state.data_to_send())


async def four_streams_one_dropped(tls_base: str, ssl_context, plan: dict[str, int], drop: str) -> dict:
    """Four streams on one connection; each reads a few hundred bytes, then all pause while the sim
    finishes (mitmproxy writes every end meanwhile, unread by the client); then `drop` resets its
    stream and the others read to the end. Returns per user (bytes read, http version, local port)."""
    ready = {user: asyncio.Event() for user in plan}
    go = asyncio.Event()
    results: dict[str, tuple] = {}

    async def one(client, user: str, max_tokens: int) -> None:
        body = b""
        async with client.stream(
            "POST", f"{tls_base}{URL_PATH}", json=request(user, max_tokens), headers=HEADERS
        ) as r:
            assert r.status_code == 200
            pieces = r.aiter_raw()
            async for piece in pieces:
                body += piece
                if len(body) >= 300:
                    break
            ready[user].set()
            await go.wait()
            if user == drop:
                await reset_stream(client, r)
            else:
                async for piece in pieces:
                    body += piece
            port = r.extensions["network_stream"].get_extra_info("client_addr")[1]
            results[user] = (body, r.http_version, port)

    async with httpx2.AsyncClient(http2=True, http1=False, verify=ssl_context, timeout=DEADLINE_S) as client:
        tasks = [asyncio.create_task(one(client, user, n)) for user, n in plan.items()]
        await asyncio.wait_for(asyncio.gather(*(e.wait() for e in ready.values())), DEADLINE_S)
        await asyncio.sleep(0.6)  # the sim is done in ~0.2 s; the reset comes well within GRACE_S
        go.set()
        await asyncio.wait_for(asyncio.gather(*tasks), DEADLINE_S)
    return results


async def connection_cut_mid_stream(tls_base: str, ssl_context, short: str, long: list[str]) -> dict:
    """One short stream read to its end, then three long ones on the same connection, each read a few
    hundred bytes, then the TCP connection is closed under them."""
    results: dict[str, bytes] = {}
    async with httpx2.AsyncClient(http2=True, http1=False, verify=ssl_context, timeout=DEADLINE_S) as client:
        url = f"{tls_base}{URL_PATH}"
        async with client.stream("POST", url, json=request(short, 10), headers=HEADERS) as r:
            results[short] = await r.aread()
        responses = [client.stream("POST", url, json=request(user, 400), headers=HEADERS) for user in long]
        opened = [await cm.__aenter__() for cm in responses]
        for user, r in zip(long, opened, strict=True):
            body = b""
            async for piece in r.aiter_raw():
                body += piece
                if len(body) >= 300:
                    break
            results[user] = body
        await opened[0].extensions["network_stream"].aclose()  # the whole connection, mid-stream
        for cm in responses:
            try:
                await cm.__aexit__(None, None, None)
            except Exception:  # noqa: BLE001 - the connection is gone, as intended
                pass
    return results


@pytest.mark.e2e
def test_one_stream_of_four_reset_after_a_few_hundred_bytes(processes, start_sim, tmp_path):
    tls_base, ca_file, out, proc = start(processes, start_sim, tmp_path)
    plan = {"h2-keep-0": 30, "h2-keep-1": 30, "h2-drop": 80, "h2-keep-2": 30}
    results = asyncio.run(four_streams_one_dropped(tls_base, ssl.create_default_context(cafile=ca_file), plan,
                                                   "h2-drop"))  # fmt: skip
    assert {version for _, version, _ in results.values()} == {"HTTP/2"}
    assert len({port for _, _, port in results.values()}) == 1  # one connection
    assert 300 <= len(results["h2-drop"][0]) < 2000
    for user in ("h2-keep-0", "h2-keep-1", "h2-keep-2"):
        assert content_events(results[user][0]) == 30 and results[user][0].endswith(b"data: [DONE]\n\n")
    stop(proc)
    assert proc.returncode == 0

    rows = rows_by_user(tmp_path, out, plan)
    for user in ("h2-keep-0", "h2-keep-1", "h2-keep-2"):
        row = rows[user]
        assert row["error_kind"] is None and row["completion_tokens"] == len(row["chunk_offsets_ns"]) == 30
        assert row["finish_reason"] == "length" and row["token_source"] == "server_usage"
    dropped = rows["h2-drop"]
    assert dropped["error_kind"] == "client_disconnected"
    # mitmproxy had handed every byte and the end to the connection before the reset came (the client's
    # HTTP/2 stack had not read them yet): the row keeps what the server produced and the proxy delivered
    assert dropped["completion_tokens"] == 80 and len(dropped["chunk_offsets_ns"]) == 80
    assert dropped["ttft_ns"] is not None and dropped["e2e_ns"] >= dropped["ttft_ns"]


@pytest.mark.e2e
def test_whole_connection_cut_mid_stream(processes, start_sim, tmp_path):
    tls_base, ca_file, out, proc = start(processes, start_sim, tmp_path)
    long = ["h2-cut-0", "h2-cut-1", "h2-cut-2"]
    results = asyncio.run(connection_cut_mid_stream(tls_base, ssl.create_default_context(cafile=ca_file),
                                                    "h2-done-first", long))  # fmt: skip
    assert content_events(results["h2-done-first"]) == 10
    stop(proc)
    assert proc.returncode == 0

    rows = rows_by_user(tmp_path, out, ["h2-done-first", *long])
    assert (rows["h2-done-first"]["error_kind"], rows["h2-done-first"]["completion_tokens"]) == (None, 10)
    for user in long:
        row = rows[user]
        assert row["error_kind"] == "client_disconnected", (user, row)
        assert row["finish_reason"] is None and 0 < len(row["chunk_offsets_ns"]) < 400
        assert row["completion_tokens"] is None or row["completion_tokens"] < 400


# -- a raw h2 client with a small flow-control window --------------------------------------------


class RawH2Client:
    """One TLS connection speaking h2 with a 2 KiB stream window; streams not in `acked` are never
    given more window, so mitmproxy keeps the rest of them (and their END_STREAM) in its send buffer."""

    WINDOW = 2048

    def __init__(self, tls_base: str, ca_file: Path):
        self.host, port = tls_base.removeprefix("https://").split(":")
        context = ssl.create_default_context(cafile=ca_file)
        context.set_alpn_protocols(["h2"])
        raw = socket.create_connection((self.host, int(port)), timeout=DEADLINE_S)
        self.sock = context.wrap_socket(raw, server_hostname=self.host)
        assert self.sock.selected_alpn_protocol() == "h2"
        self.sock.settimeout(0.05)
        self.authority = f"{self.host}:{port}"
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        self.conn.local_settings = h2.settings.Settings(
            client=True,
            initial_values={h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: self.WINDOW,
                            h2.settings.SettingCodes.ENABLE_PUSH: 0},
        )  # fmt: skip
        self.conn.initiate_connection()
        self.sock.sendall(self.conn.data_to_send())
        self.bodies: dict[int, bytes] = {}
        self.ended: set[int] = set()
        self.acked: set[int] = set()

    def post(self, stream_id: int, body: dict, acked: bool) -> None:
        headers = [(":method", "POST"), (":scheme", "https"), (":authority", self.authority),
                   (":path", URL_PATH), ("content-type", "application/json"),
                   *((k.lower(), v) for k, v in HEADERS.items())]  # fmt: skip
        self.conn.send_headers(stream_id, headers)
        self.conn.send_data(stream_id, json.dumps(body).encode(), end_stream=True)
        self.bodies[stream_id] = b""
        if acked:
            self.acked.add(stream_id)
        self.sock.sendall(self.conn.data_to_send())

    def pump(self, seconds: float) -> None:
        """Read and handle frames for this long (bounded: the socket times out every 50 ms)."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                continue
            assert data, "the proxy closed the connection"
            for event in self.conn.receive_data(data):
                if isinstance(event, h2.events.ResponseReceived):
                    assert dict(event.headers)[b":status"] == b"200"
                elif isinstance(event, h2.events.DataReceived):
                    self.bodies[event.stream_id] += event.data
                    if event.stream_id in self.acked:
                        self.conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                elif isinstance(event, h2.events.StreamEnded):
                    self.ended.add(event.stream_id)
            self.sock.sendall(self.conn.data_to_send())

    def reset(self, stream_id: int) -> None:
        self.conn.reset_stream(stream_id, h2.errors.ErrorCodes.CANCEL)
        self.sock.sendall(self.conn.data_to_send())

    def cut(self) -> None:
        self.sock.close()  # no GOAWAY: the TCP connection just goes


def check_cut_short(row: dict, delivered: bytes, user: str) -> None:
    """A row built from only the 2 KiB that left mitmproxy: no usage, no finish reason, those tokens."""
    assert len(delivered) == RawH2Client.WINDOW
    assert row["error_kind"] == "client_disconnected", (user, row)
    assert len(row["chunk_offsets_ns"]) == content_events(delivered) > 0
    assert row["finish_reason"] is None and row["token_source"] == "tokenizer"
    assert row["completion_tokens"] is not None and row["completion_tokens"] < 40


@pytest.mark.e2e
def test_a_reset_while_the_end_waits_in_the_send_buffer(processes, start_sim, tmp_path):
    """The client stops granting window to one of four streams and resets it after the sim has
    finished it (the `response` hook had run, its end and most bytes were still in mitmproxy's buffer)."""
    tls_base, ca_file, out, proc = start(processes, start_sim, tmp_path)
    client = RawH2Client(tls_base, ca_file)
    users = {1: "raw-reset", 3: "raw-ok-0", 5: "raw-ok-1", 7: "raw-ok-2"}
    for stream_id, user in users.items():
        client.post(stream_id, request(user, 40), acked=stream_id != 1)
    client.pump(1.0)  # the sim is done in ~0.1 s: three streams end, stream 1 waits for window
    assert client.ended == {3, 5, 7}
    client.reset(1)
    client.pump(0.3)
    client.cut()
    stop(proc)
    assert proc.returncode == 0

    rows = rows_by_user(tmp_path, out, users.values())
    for stream_id in (3, 5, 7):
        row = rows[users[stream_id]]
        assert (row["error_kind"], row["completion_tokens"], len(row["chunk_offsets_ns"])) == (None, 40, 40)
        assert content_events(client.bodies[stream_id]) == 40
    check_cut_short(rows["raw-reset"], client.bodies[1], "raw-reset")


@pytest.mark.e2e
def test_connection_lost_while_ends_wait_in_the_send_buffer(processes, start_sim, tmp_path):
    """Two streams held back by the client's window when the TCP connection goes, a third complete."""
    tls_base, ca_file, out, proc = start(processes, start_sim, tmp_path)
    client = RawH2Client(tls_base, ca_file)
    users = {1: "raw-cut-0", 3: "raw-cut-1", 5: "raw-ok"}
    for stream_id, user in users.items():
        client.post(stream_id, request(user, 40), acked=stream_id == 5)
    client.pump(1.0)
    assert client.ended == {5}
    client.cut()
    time.sleep(0.2)
    stop(proc)
    assert proc.returncode == 0

    rows = rows_by_user(tmp_path, out, users.values())
    assert (rows["raw-ok"]["error_kind"], rows["raw-ok"]["completion_tokens"]) == (None, 40)
    for stream_id in (1, 3):
        check_cut_short(rows[users[stream_id]], client.bodies[stream_id], users[stream_id])


# -- the pieces, in-process --------------------------------------------------------------------


def h2_pair(window: int):
    """mitmproxy's server-side BufferedH2Connection and an h2 client, connected in memory."""
    server = BufferedH2Connection(Http2Server.h2_conf)
    client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    client.local_settings = h2.settings.Settings(
        client=True, initial_values={h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: window}
    )
    client.initiate_connection()
    server.initiate_connection()
    server.receive_data(client.data_to_send())
    client.receive_data(server.data_to_send())
    server.receive_data(client.data_to_send())
    headers = [(":method", "POST"), (":scheme", "https"), (":authority", "x"), (":path", "/")]
    client.send_headers(1, headers, end_stream=True)
    server.receive_data(client.data_to_send())
    server.send_headers(1, [(":status", "200")])
    return server, client


def test_reset_tap_sees_the_unsent_bytes_and_h2_still_handles_the_frame():
    server, client = h2_pair(window=100)
    seen = []
    assert h2_streams._tap_resets(
        server, lambda stream_id, code: seen.append((stream_id, code, server_unsent()))
    )

    def server_unsent():
        return sum(len(chunk.data) for chunk in server.stream_buffers.get(1, ()))

    server.send_data(1, b"x" * 250)
    server.end_stream(1)
    assert server_unsent() == 150  # 100 fit the window
    client.receive_data(server.data_to_send())
    client.reset_stream(1, h2.errors.ErrorCodes.CANCEL)
    events = server.receive_data(client.data_to_send())
    assert seen == [(1, h2.errors.ErrorCodes.CANCEL, 150)]  # before mitmproxy dropped the buffer
    assert [type(e) for e in events] == [h2.events.StreamReset] and 1 not in server.stream_buffers


def test_reset_tap_also_sees_a_reset_h2_would_ignore():
    server, client = h2_pair(window=65535)
    seen = []
    h2_streams._tap_resets(server, lambda stream_id, code: seen.append(stream_id))
    server.send_data(1, b"data: [DONE]\n\n", end_stream=True)  # written; the client has not read it yet
    client.reset_stream(1, h2.errors.ErrorCodes.CANCEL)
    assert server.receive_data(client.data_to_send()) == [] and seen == [1]


def test_reset_tap_only_where_it_was_checked(monkeypatch):
    server, _ = h2_pair(window=100)
    monkeypatch.setattr(h2_streams, "_TAP_VERSIONS", False)
    assert not h2_streams._tap_resets(server, lambda *a: None)
    monkeypatch.setattr(h2_streams, "_TAP_VERSIONS", True)
    del server._frame_dispatch_table[RstStreamFrame]
    assert not h2_streams._tap_resets(server, lambda *a: None)


def test_a_failing_tap_callback_never_stops_the_frame():
    server, client = h2_pair(window=100)
    h2_streams._tap_resets(server, lambda *a: 1 / 0)
    client.reset_stream(1, h2.errors.ErrorCodes.CANCEL)
    assert [type(e) for e in server.receive_data(client.data_to_send())] == [h2.events.StreamReset]


def test_reads_are_cut_to_the_delivered_bytes():
    cap = Capture("r", "chat_completions", 0, 0, max_capture_bytes=1000)
    for data in (b"aaaa", b"bbbb", b"cccc", b""):
        cap.tap(data)
    keep_delivered(cap, 6)
    assert [data for _, data in cap.reads] == [b"aaaa", b"bb"] and cap.captured_bytes == 6
    assert cap.end_ns is None and cap.last_read_ns == cap.reads[-1][0]
    keep_delivered(cap, 100)  # nothing to cut
    assert [data for _, data in cap.reads] == [b"aaaa", b"bb"]


@pytest.mark.parametrize(
    ("message", "kind"),
    [
        ("Client disconnected.", None),  # HTTP/1.1: an SDK hangs up after [DONE], before the terminator
        ("stream reset by client (CANCEL)", None),  # an HTTP/2 upstream's reset reads the same
        (h2_streams.HANG_UP_PREFIX + "stream reset by client (CANCEL) after its end was written)",
         "client_disconnected"),
        (h2_streams.HANG_UP_PREFIX + "peer closed connection)", "client_disconnected"),
    ],
)  # fmt: skip
def test_a_forwarded_done_does_not_excuse_an_http2_hang_up(message, kind):
    done = summarize_stream([(1, b'{"choices":[{"delta":{"content":"x"}}]}'), (2, b"[DONE]")])
    assert done.done_seen
    cap = Capture("r", "chat_completions", 0, 0, 1024)
    cap.outcome, cap.error_msg, cap.status, cap.content_type = "error", message, 200, "text/event-stream"
    cap.request_body = b"{}"  # the request was read whole
    assert classify_error(cap, RequestShape(), done) == kind
