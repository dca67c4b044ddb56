"""Where the engine's tokens go: straight onto the HTTP connection, synchronously, in the step.

A streamed token is one chunked-encoding frame written to the transport (no task, no await):
aiohttp has already sent the headers and the opening event; the handler ends the body.
"""

from __future__ import annotations

import asyncio

from llmreplay.sim.engine import Sequence
from llmreplay.sim.faults import STREAM_OUTCOMES
from llmreplay.sim.messages_wire import MessagesEncoder
from llmreplay.sim.responses_wire import ResponsesEncoder
from llmreplay.sim.wire import ChatEncoder, CompletionEncoder, chunk_frame, usage

Encoder = ChatEncoder | CompletionEncoder | ResponsesEncoder | MessagesEncoder


class StreamSink:
    """SSE answer: one frame per token; the last token's frame carries the closing events.

    A stream is complete (`final_written`) from the moment `transport.write` accepted its final
    frame (the frame ending in `data: [DONE]`, response.completed or message_stop: the last token with the finish reason and usage, or
    an injected in-stream error) while the transport was not closing, that is before the sim
    learned of any disconnect. Every byte a client needs is then the kernel's to deliver. What
    follows is framing, written by the handler one or more loop passes later: the chunked-encoding
    terminator of `write_eof`. A client that stops at [DONE] (the openai SDK closes the response
    there) may hang up before it, and the handler must not turn that into `cancelled_by_client`.
    A disconnect seen before the final write (`emit` finds the transport closing) is a cancellation.
    """

    __slots__ = (
        "_transport",
        "_encoder",
        "_finish_reason",
        "_include_usage",
        "_fault",
        "_stop_after",
        "done",
        "final_written",
    )

    def __init__(
        self,
        transport: asyncio.Transport,
        encoder: Encoder,
        finish_reason: str,
        include_usage: bool,
        fault: str | None,
        stop_after_tokens: int,
        done: asyncio.Future,
    ):
        self._transport = transport
        self._encoder = encoder
        self._finish_reason = finish_reason
        self._include_usage = include_usage
        self._fault = fault
        self._stop_after = stop_after_tokens
        self.done = done
        self.final_written = False

    def emit(self, seq: Sequence, number: int, now_ns: int) -> bool:
        transport = self._transport
        if transport.is_closing():
            seq.outcome = "cancelled_by_client"
            return False
        if self._fault is not None and number > self._stop_after:
            return self._inject(seq)
        encoder = self._encoder
        start = encoder.start(seq.prompt_tokens, seq.cached_tokens) if number == 1 else b""
        if number < seq.target_tokens:
            if start:
                transport.write(chunk_frame(start + encoder.token(number, seq.target_tokens)))
            else:
                transport.write(encoder.token_frame(number, seq.target_tokens))
            return True
        usage_obj = None
        if self._include_usage:
            usage_obj = usage(seq.prompt_tokens, number, seq.cached_tokens, seq.reasoning_tokens)
        payload = start + encoder.token(number, number) + encoder.closing(self._finish_reason, usage_obj)
        transport.write(chunk_frame(payload))  # the last token travels with the closing events
        self.final_written = True
        return True

    def _inject(self, seq: Sequence) -> bool:
        if self._fault == "cut":
            self._transport.abort()  # RST mid-stream, as a crashed engine or proxy would
            seq.outcome = "cut"
        elif self._fault == "truncate":
            seq.outcome = "truncated"  # the handler ends the body cleanly, without [DONE]
        else:
            self._transport.write(chunk_frame(self._encoder.stream_error()))
            self.final_written = True
            seq.outcome = "stream_error"
        return False

    def finish(self, seq: Sequence, now_ns: int) -> None:
        if not self.done.done():
            self.done.set_result(None)


class BodySink:
    """Non-streamed answer: tokens are only counted; faults stop the sequence at their token."""

    __slots__ = ("_transport", "_fault", "_stop_after", "done")

    def __init__(
        self, transport: asyncio.Transport, fault: str | None, stop_after_tokens: int, done: asyncio.Future
    ):
        self._transport = transport
        self._fault = fault
        self._stop_after = stop_after_tokens
        self.done = done

    def emit(self, seq: Sequence, number: int, now_ns: int) -> bool:
        if self._transport.is_closing():
            seq.outcome = "cancelled_by_client"
            return False
        if self._fault is not None and number > self._stop_after:
            seq.outcome = STREAM_OUTCOMES[self._fault]
            return False
        return True

    def finish(self, seq: Sequence, now_ns: int) -> None:
        if not self.done.done():
            self.done.set_result(None)
