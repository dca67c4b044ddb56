"""A stream's end against the client's hang-up, in the orders a busy machine produces.

The engine writes a stream's final frame (last token, usage, [DONE]) in its step; the handler
wakes one or more loop passes later to write the chunked terminator. A client that stops at
[DONE] (the openai SDK closes there) may be gone by then: the stream is complete all the same.
These drive the real engine, stepper, sink and handler code on an in-process loop, with a fake
transport that "hears" the client close right after a chosen write.
"""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import ClientConnectionResetError

from llmreplay.sim.config import SimConfig
from llmreplay.sim.engine import Sequence
from llmreplay.sim.server import ServedRequest, SimServer
from llmreplay.sim.sinks import StreamSink
from llmreplay.sim.stepper import EngineStepper
from llmreplay.sim.wire import ChatEncoder

TARGET_TOKENS = 4


class HangingUpTransport:
    """Accepts writes until the client's close is seen: after the write holding `close_after`."""

    def __init__(self, close_after: bytes, on_close=None):
        self.written: list[bytes] = []
        self.closing = False
        self._close_after = close_after
        self._on_close = on_close

    def is_closing(self) -> bool:
        return self.closing

    def write(self, data: bytes) -> None:
        assert not self.closing, "a write to a closing transport"
        self.written.append(data)
        if self._close_after in data:
            self.closing = True
            if self._on_close is not None:
                self._on_close()

    def abort(self) -> None:
        self.closing = True


class Response:
    """`write_eof` as aiohttp's StreamWriter does it: refused once the transport is closing."""

    def __init__(self, transport: HangingUpTransport):
        self._transport = transport

    async def write_eof(self) -> None:
        if self._transport.is_closing():
            raise ClientConnectionResetError("Cannot write to closing transport")
        self._transport.write(b"0\r\n\r\n")


async def _serve_one(close_after: bytes, cancel_handler_on_close: bool) -> tuple[ServedRequest, Sequence]:
    loop = asyncio.get_running_loop()
    server = SimServer(SimConfig(decode_base_ms=1.0), tokenizer=None)
    server._stepper = EngineStepper(server.engine, loop, server._on_step)
    handler: asyncio.Task | None = None

    def client_gone() -> None:  # aiohttp's connection_lost with handler_cancellation=True
        if cancel_handler_on_close:
            handler.cancel()

    transport = HangingUpTransport(close_after, client_gone)
    sink = StreamSink(
        transport, ChatEncoder("chatcmpl-x", 0, "sim-model", None, "call_x"), "length", True, None,
        TARGET_TOKENS, loop.create_future(),
    )  # fmt: skip
    seq = Sequence("r", 8, (), TARGET_TOKENS, 0, sink)
    exchange = ServedRequest(
        "r", 0, 0, "chat_completions", model="sim-model", stream=True, status=200, seq=seq
    )

    async def handle() -> None:  # _serve's tail for a stream
        await server._run(seq, 0, True, "length", exchange)
        await server._end_stream(Response(transport), sink, exchange)

    handler = asyncio.create_task(handle())
    try:
        await handler
    except asyncio.CancelledError:
        assert cancel_handler_on_close
    server._log_pool.shutdown()
    server._tokenize_pool.shutdown()
    return exchange, seq


@pytest.mark.parametrize("cancel_handler", [False, True], ids=["write_eof-refused", "handler-cancelled"])
def test_a_stream_whose_done_event_was_written_before_the_hang_up_is_ok(cancel_handler):
    exchange, seq = asyncio.run(_serve_one(b"[DONE]", cancel_handler))
    assert (exchange.outcome, exchange.finish_reason) == ("ok", "length")
    assert seq.emitted_tokens == TARGET_TOKENS and seq.sink.final_written


@pytest.mark.parametrize("cancel_handler", [False, True], ids=["write_eof-refused", "handler-cancelled"])
def test_a_hang_up_before_the_last_token_is_a_cancellation(cancel_handler):
    second_token = ChatEncoder("chatcmpl-x", 0, "sim-model", None, "call_x").token_frame(2, TARGET_TOKENS)
    exchange, seq = asyncio.run(_serve_one(second_token, cancel_handler))
    assert (exchange.outcome, exchange.finish_reason) == ("cancelled_by_client", None)
    assert seq.emitted_tokens == 2 and not seq.sink.final_written
