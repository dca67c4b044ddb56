"""The raw HTTP/1.1 client: request encoding, and real responses from a real asyncio server on
127.0.0.1 (chunked SSE split anywhere, bodies delimited by close, keep-alive reuse, closed idle sockets)."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from llmreplay.errors import BadInput
from replayer.loop.client import ClientExchange, Outcome, ReadClock
from replayer.loop.http_pool import ConnectionPool, encode_request, parse_endpoint


def test_endpoint_and_request_bytes():
    ep = parse_endpoint("http://127.0.0.1:8000/prefix")
    assert (ep.host, ep.port, ep.tls, ep.host_header, ep.base_path) == (
        "127.0.0.1",
        8000,
        False,
        "127.0.0.1:8000",
        "/prefix",
    )
    assert parse_endpoint("https://api.example.com").host_header == "api.example.com"
    raw = encode_request(ep, "POST", "/v1/completions", [("X-Request-Id", "r1")], b"{}")
    head, body = raw.split(b"\r\n\r\n")
    assert head.split(b"\r\n") == [
        b"POST /prefix/v1/completions HTTP/1.1",
        b"Host: 127.0.0.1:8000",
        b"X-Request-Id: r1",
        b"Content-Length: 2",
    ]
    assert body == b"{}"


def test_header_injection_is_bad_input():
    ep = parse_endpoint("http://127.0.0.1:8000")
    with pytest.raises(BadInput):
        encode_request(ep, "POST", "/", [("X-A", "v\r\nEvil: 1")], b"")
    with pytest.raises(BadInput):
        encode_request(ep, "POST", "/", [("X-A", "caf\u00e9\u2603")], b"")


def sse_event(content=None, finish=None, usage=None) -> bytes:
    obj = {"choices": [{"index": 0, "delta": {"content": content}, "finish_reason": finish}]}
    if usage:
        obj = {"choices": [], "usage": usage}
    return b"data: " + orjson.dumps(obj) + b"\n\n"


STREAM = (
    sse_event("a")
    + sse_event("b")
    + sse_event("c", "stop")
    + sse_event(usage={"prompt_tokens": 1, "completion_tokens": 3})
    + b"data: [DONE]\n\n"
)


def chunked(parts: list[bytes]) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"


async def serve(answers: list[bytes], pieces: int, close_after: set[int]):
    """A server that answers request k with answers[k], written in `pieces` separate writes."""
    served = {"count": 0, "connections": 0}

    async def handle(reader, writer):
        served["connections"] += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                await reader.readexactly(length)
                k = served["count"]
                served["count"] += 1
                data = answers[k]
                step = max(1, len(data) // pieces)
                for i in range(0, len(data), step):
                    writer.write(data[i : i + step])
                    await writer.drain()
                    await asyncio.sleep(0.002)
                if k in close_after:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, served


async def exchange(pool: ConnectionPool, stream: bool = True) -> Outcome:
    conn = pool.take_idle() or await pool.open()
    ex = ClientExchange(Outcome(0), stream, None, ReadClock(asyncio.get_running_loop()))
    ex.send(pool, conn, encode_request(pool.endpoint, "POST", "/v1/chat/completions", [], b"{}"))
    return await asyncio.wait_for(ex.done, 10)


SSE_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


@pytest.mark.parametrize("pieces", [1, 7, 200])
def test_chunked_sse_split_anywhere_is_read_whole_and_the_connection_reused(pieces):
    body = chunked([STREAM[:50], STREAM[50:51], STREAM[51:]])
    whole = b'{"choices": [{"message": {"content": "x"}, "finish_reason": "stop"}], "usage": {}}'
    plain = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (
        len(whole),
        whole,
    )

    async def main():
        server, served = await serve([SSE_HEAD + body, plain], pieces, set())
        port = server.sockets[0].getsockname()[1]
        pool = ConnectionPool(parse_endpoint(f"http://127.0.0.1:{port}"), 5.0, 0)
        first = await exchange(pool)
        second = await exchange(pool, stream=False)
        pool.close()
        server.close()
        return first, second, served

    first, second, served = asyncio.run(main())
    assert first.error_kind is None, first.error_detail
    assert len(first.chunk_offsets_ns) == 3 and first.finish_reason == "stop"
    assert first.usage == {"prompt_tokens": 1, "completion_tokens": 3}
    assert 0 < first.ttfb_ns <= first.ttft_ns <= first.e2e_ns
    assert second.error_kind is None and second.finish_reason == "stop" and second.ttft_ns is None
    assert served["connections"] == 1  # keep-alive: the second request used the same socket


def test_body_until_close_and_cut_stream():
    until_close = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n" + STREAM
    cut = SSE_HEAD + chunked([sse_event("a")])[:-5]  # no last chunk: the server dies mid-stream

    async def main():
        server, served = await serve([until_close, cut], 3, {0, 1})
        port = server.sockets[0].getsockname()[1]
        pool = ConnectionPool(parse_endpoint(f"http://127.0.0.1:{port}"), 5.0, 0)
        outcomes = [await exchange(pool), await exchange(pool)]
        server.close()
        return outcomes, served

    (whole, reset), served = asyncio.run(main())
    assert whole.error_kind is None and len(whole.chunk_offsets_ns) == 3
    assert reset.error_kind == "connection_reset" and len(reset.chunk_offsets_ns) == 1
    assert served["connections"] == 2  # a closed connection is never reused


def test_idle_connection_closed_by_the_server_is_not_handed_out():
    async def main():
        async def hang_up(reader, writer):
            writer.close()

        server = await asyncio.start_server(hang_up, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        pool = ConnectionPool(parse_endpoint(f"http://127.0.0.1:{port}"), 5.0, 0)
        await pool.warm(2)
        await asyncio.sleep(0.1)
        taken = pool.take_idle()
        server.close()
        return pool.opened, taken

    opened, taken = asyncio.run(main())
    assert opened == 2 and taken is None


def test_stop_drops_the_connection_and_records_the_reason():
    async def main():
        server, served = await serve([SSE_HEAD + chunked([sse_event("a")] * 400)], 400, set())
        port = server.sockets[0].getsockname()[1]
        pool = ConnectionPool(parse_endpoint(f"http://127.0.0.1:{port}"), 5.0, 0)
        conn = await pool.open()
        clock = ReadClock(asyncio.get_running_loop())
        ex = ClientExchange(Outcome(0), True, 5, clock)  # mirror a client that left after 5 chunks
        ex.send(pool, conn, encode_request(pool.endpoint, "POST", "/", [], b"{}"))
        out = await asyncio.wait_for(ex.done, 10)
        server.close()
        return out, conn

    out, conn = asyncio.run(main())
    assert out.error_kind == "cancelled" and len(out.chunk_offsets_ns) == 5
    assert not conn.usable


def test_reads_keep_their_own_stamps_and_count_when_stopped_before_they_were_parsed():
    """Parsing is deferred to after the loop's pass: a read's chunk must carry the read's time, and
    reads that arrived before a stop (a mirrored cancel) must still count."""

    async def main():
        async def silent(reader, writer):
            await reader.read(1)
            await asyncio.sleep(5)  # the test feeds the response itself

        server = await asyncio.start_server(silent, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        pool = ConnectionPool(parse_endpoint(f"http://127.0.0.1:{port}"), 5.0, 0)
        conn = await pool.open()
        ex = ClientExchange(Outcome(0), True, None, ReadClock(asyncio.get_running_loop()))
        ex.send(pool, conn, encode_request(pool.endpoint, "POST", "/", [], b"{}"))
        stamps = []
        for part in (SSE_HEAD, b"%x\r\n%s\r\n" % (len(sse_event("a")), sse_event("a"))):
            ex.data_received(part)  # as the connection would, one read at a time
            stamps.append(ex.last_ns)
            await asyncio.sleep(0.02)  # the loop runs: these two reads are parsed
        late = b"%x\r\n%s\r\n" % (len(sse_event("b")), sse_event("b"))
        ex.data_received(late)  # stashed, not parsed yet ...
        late_ns = ex.last_ns
        ex.stop("cancelled")  # ... when the replay cancels the request
        out = await asyncio.wait_for(ex.done, 5)
        server.close()
        return out, stamps, late_ns

    out, (head_ns, first_ns), late_ns = asyncio.run(main())
    assert out.error_kind == "cancelled"
    assert list(out.chunk_offsets_ns) == [first_ns - out.sent_ns, late_ns - out.sent_ns]
    assert out.ttfb_ns == head_ns - out.sent_ns and out.ttft_ns == first_ns - out.sent_ns
    assert late_ns - first_ns >= 15_000_000  # each read kept its own time, 20 ms apart


@pytest.mark.parametrize("pieces", [1, 9])
def test_interim_1xx_answers_are_skipped_and_the_final_answer_read(pieces):
    """100 Continue and 103 Early Hints come before the real answer; clients must accept them (RFC 9110 15.2)."""
    interim = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </x>; rel=preload\r\n\r\n"
    upgrade = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"

    async def main():
        server, served = await serve([interim + SSE_HEAD + chunked([STREAM]), upgrade], pieces, {1})
        port = server.sockets[0].getsockname()[1]
        pool = ConnectionPool(parse_endpoint(f"http://127.0.0.1:{port}"), 5.0, 0)
        outcomes = [await exchange(pool), await exchange(pool)]
        pool.close()
        server.close()
        return outcomes

    answered, switched = asyncio.run(main())
    assert answered.error_kind is None and answered.http_status == 200, answered.error_detail
    assert len(answered.chunk_offsets_ns) == 3 and answered.finish_reason == "stop"
    assert switched.error_kind == "invalid_response" and switched.http_status == 101  # not asked for
