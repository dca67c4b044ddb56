"""A stream's memory does not grow with its length (issue 26, 4): an SSE event longer than
MAX_EVENT_BYTES makes the stream invalid instead of being buffered, a long event is not re-joined on
every read, and a stream's raw reads are kept only up to MAX_KEPT_ANSWER_BYTES."""

from __future__ import annotations

import time

from replayer.loop.client import MAX_KEPT_ANSWER_BYTES
from replayer.loop.sse import MAX_EVENT_BYTES, SseStream

CHUNK = b'data: {"choices":[{"index":0,"delta":{"content":"tok"}}]}\n\n'
END = b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n'


def test_a_10_mb_unterminated_line_is_an_invalid_stream_at_1_mb_in_linear_time():
    sse = SseStream(0)
    sse.feed(CHUNK, 1)
    began = time.perf_counter()
    line = b'data: {"choices":[{"delta":{"content":"' + b"x" * (16384 - 40)
    sse.feed(line, 2)
    for i in range(10 * 64):  # 10 MB more in 16 KB reads: the join-per-read reader copied ~50 GB
        sse.feed(b"y" * 16384, 3 + i)
    assert time.perf_counter() - began < 2.0
    assert sse.overflow and sse.invalid == f"an SSE event longer than {MAX_EVENT_BYTES >> 20} MB"
    assert sse._parts_bytes <= MAX_EVENT_BYTES + 16384 and len(sse._buffer) == 0
    assert len(sse.chunk_offsets_ns) == 1


def test_a_long_event_split_over_many_reads_is_read_whole():
    for sep in (b"\n\n", b"\r\n\r\n"):
        sse = SseStream(0)
        big = b'data: {"choices":[{"index":0,"delta":{"content":"' + b"z" * 300_000 + b'"}}]}' + sep
        stream = CHUNK.replace(b"\n\n", sep) + big + CHUNK.replace(b"\n\n", sep) + END.replace(b"\n\n", sep)
        for at in range(0, len(stream), 4093):  # reads that cut the CR LF pairs anywhere
            sse.feed(stream[at : at + 4093], at)
        sse.finish(len(stream))
        assert not sse.overflow and sse.invalid is None
        assert len(sse.chunk_offsets_ns) == 3 and sse.done and sse.finish_reason == "stop"


def test_an_endless_stream_keeps_no_more_than_the_bound_of_raw_reads():
    import asyncio

    from replayer.loop.client import ClientExchange, Outcome, ReadClock

    async def run():
        loop = asyncio.get_running_loop()
        exchange = ClientExchange(Outcome(0), True, None, ReadClock(loop), keep_answer=True)
        exchange.on_header(b"Content-Type", b"text/event-stream")

        class Parser:
            def get_status_code(self):
                return 200

        exchange._parser = Parser()
        exchange.on_headers_complete()
        burst = CHUNK * 1000
        for _ in range((MAX_KEPT_ANSWER_BYTES // len(burst)) * 3):
            exchange.on_body(burst)
        assert exchange._raw is None  # past the bound nothing is kept
        return exchange

    exchange = asyncio.run(run())
    assert len(exchange._sse.chunk_offsets_ns) > 3 * MAX_KEPT_ANSWER_BYTES // len(CHUNK) - 2000
