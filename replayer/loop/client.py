"""One HTTP request, timed on the monotonic clock, classified into the trace's error taxonomy.
Reads are stamped and stashed, parsed after the loop's pass over ready sockets: no task, timer or
future per chunk (docs/design/replay-loop.md)."""

from __future__ import annotations

import asyncio
import email.utils
import time
from array import array
from collections import deque

import httptools
import orjson

from llmreplay.error_kinds import error_kind_for_status
from llmreplay.wire.dialects import DIALECTS
from llmreplay.wire.error_object import error_object_kind
from llmreplay.wire.stream_timing import stream_timing
from llmreplay.wire.usage import parse_usage
from replayer.loop.http_pool import Connection, ConnectionPool
from replayer.loop.sse import SseStream

ERROR_BODY_LIMIT_BYTES = 65_536
# A stream's raw reads are kept (for the tokenizer fallback when it reports no usage, and for a session
# turn that echoes the answer) up to this; past it they are dropped and nothing more is kept: a stream's
# memory does not grow with its length (its token count then stays unknown, its echo is the text as built)
MAX_KEPT_ANSWER_BYTES = 4 << 20
MAX_STAMPED_CHUNKS = 1 << 18  # chunk stamps kept a stream (2 MB): no real answer is longer; past it, none
MAX_WHOLE_BODY_BYTES = 32 << 20  # a JSON answer larger than this is an invalid_response, not read on
ERROR_EXCERPT_BYTES = 2_048  # of an error response's body, kept as the request's error_detail
# read past the excerpt so that a key straddling its cut (escaped, percent-encoded) is still whole when
# the spool decodes and scrubs it (llmreplay.redaction.scrubbed_excerpt), and only then cuts
ERROR_KEPT_BYTES = ERROR_EXCERPT_BYTES + 8_192
NEVER_NS = 1 << 62
PARSE_SLICE_NS = 250_000  # parse stashed reads this long, then let the loop poll sockets again
_HEAD, _ERROR, _SSE, _WHOLE, _DONE = range(5)


class ReadClock:
    """Timestamps network reads, parses them between polls, lets a read hand the dispatcher its due request.

    Every read in one pass of the event loop over ready sockets gets the time of the pass's first
    read: the bytes were all waiting when the pass began, so the order in which we process them
    must not show up as latency. Their parsing is deferred to after the pass and done in slices of
    PARSE_SLICE_NS, so the loop polls again soon and the next reads are stamped fresh. And when a
    burst holds the loop past a request's due time, the read that notices calls `on_due`, so
    dispatch is late by one read's work, not by the whole burst. The per-read half of this lives
    in `ClientExchange.data_received`, inline: a call per read costs.
    """

    __slots__ = ("now_ns", "next_due_ns", "on_due", "batch_ns", "backlog", "_loop", "_after_pass_due")

    def __init__(self, loop: asyncio.AbstractEventLoop, now_ns=time.perf_counter_ns):
        self.now_ns = now_ns  # the runner's clock (replayer.loop.clock)
        self.next_due_ns = NEVER_NS  # the dispatcher's next deadline (now_ns)
        self.on_due = None  # called with no argument once a read sees that deadline pass
        self.batch_ns = 0  # the stamp of this pass's reads; 0 between passes
        self.backlog: deque[ClientExchange] = deque()  # exchanges with stashed, unparsed reads
        self._loop = loop
        self._after_pass_due = False

    def begin_pass(self, now_ns: int) -> None:
        """The pass's first read: its time stamps the pass; parsing is queued behind the pass."""
        self.batch_ns = now_ns
        if not self._after_pass_due:
            self._after_pass_due = True
            self._loop.call_soon(self._after_pass)  # runs after this pass's I/O callbacks

    def _after_pass(self) -> None:
        """End the pass's timestamp batch; parse stashed reads for one slice, the rest after a poll."""
        self.batch_ns = 0
        backlog = self.backlog
        clock = self.now_ns
        deadline = clock() + PARSE_SLICE_NS
        while backlog:
            backlog.popleft().parse_pending()
            if backlog and clock() >= deadline:
                self._loop.call_soon(self._after_pass)  # after the loop's next poll
                return
        self._after_pass_due = False


class Outcome:
    """What one request measured; offsets are ns from `sent_ns` (monotonic clock)."""

    __slots__ = (
        "sent_ns",
        "on_wire",
        "http_status",
        "error_kind",
        "error_detail",
        "retry_after_ms",
        "ttfb_ns",
        "ttft_ns",
        "ttfo_ns",
        "e2e_ns",
        "chunk_offsets_ns",
        "reasoning_tokens",
        "reasoning_ns",
        "finish_reason",
        "usage",
        "tool_calls_count",
        "response_text_bytes",
        "stop_reason",
        "response_id",
    )

    def __init__(self, sent_ns: int):
        self.sent_ns = sent_ns  # the call; replaced by the moment the bytes were written (on_wire)
        self.on_wire = False
        self.http_status: int | None = None
        self.error_kind: str | None = None
        self.error_detail: str | None = None  # for logs and the summary, never a secret
        self.retry_after_ms: int | None = None
        self.ttfb_ns: int | None = None
        self.ttft_ns: int | None = None  # first token on any channel, reasoning included
        self.ttfo_ns: int | None = None  # first answer token (content, refusal, tool call)
        self.e2e_ns: int | None = None
        self.chunk_offsets_ns: array | None = None  # array("q") from the SSE reader, every channel
        self.reasoning_tokens: int | None = (
            None  # of the completion tokens (llmreplay.wire.stream_timing)
        )
        self.reasoning_ns: int | None = None  # TTFT -> TTFO
        self.finish_reason: str | None = None
        self.usage: dict | None = None
        self.tool_calls_count = 0
        self.response_text_bytes: list[bytes] | None = None  # kept only when usage is missing
        self.stop_reason: str | None = None  # "cancelled", "timeout" or "shutdown" when stopped from outside
        self.response_id: str | None = None  # the id staging gave the answer (a chained turn's next needs it)

    def resend(self) -> None:
        """Forget a first attempt that got no byte back (a stale keep-alive connection)."""
        self.on_wire = False
        self.error_kind = self.error_detail = self.e2e_ns = None

    def fail(self, kind: str, detail: str | None = None) -> None:
        if self.error_kind is None:
            self.error_kind = kind
            self.error_detail = detail

    def __getstate__(self):  # a compact tuple: workers hand thousands of these back
        return tuple(getattr(self, name) for name in Outcome.__slots__)

    def __setstate__(self, state) -> None:
        for name, value in zip(Outcome.__slots__, state, strict=True):
            setattr(self, name, value)


def status_kind(status: int) -> str | None:
    """Error kind of a response status; a status that is neither an error nor 2xx is not the wire format."""
    kind = error_kind_for_status(status)
    if kind is None and not 200 <= status < 300:
        return "invalid_response"
    return kind


def retry_after_ms(value: str | None, now_unix_s: float | None = None) -> int | None:
    """Retry-After as delay-seconds or an HTTP date, in ms; None when absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return int(value) * 1000
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    now = time.time() if now_unix_s is None else now_unix_s
    return max(0, round((when.timestamp() - now) * 1000))


class ClientExchange:
    """One request on one connection; the httptools callbacks fill its Outcome; `done` resolves at the end.

    `last_ns` (the latest read, or the send) lets the runner's watchdog enforce the read timeout
    without a timer per request."""

    __slots__ = (
        "outcome",
        "stream",
        "cancel_after_chunks",
        "done",
        "last_ns",
        "_clock",
        "_pool",
        "_conn",
        "_parser",
        "_state",
        "_sse",
        "_raw",
        "_body",
        "_body_bytes",
        "_raw_bytes",
        "_content_type",
        "_retry_after",
        "_length_known",
        "_pending",
        "_read_ns",
        "_interim",
        "_dialect",
        "_received",
        "stale",
        "keep_answer",
        "answer",
    )

    def __init__(
        self,
        outcome: Outcome,
        stream: bool,
        cancel_after_chunks: int | None,
        clock: ReadClock,
        dialect: str = "chat",
        keep_answer: bool = False,
    ):
        self.outcome = outcome
        # the session's next turn sends this answer back (replayer.loop.answer_echo): its body is kept
        self.keep_answer = keep_answer
        self.answer: tuple[list[bytes], bool] | None = None  # (body reads, streamed) of a kept answer
        self._dialect = dialect  # llmreplay.wire.dialects: the answer's grammar
        self._clock = clock
        self.stream = stream
        self.cancel_after_chunks = cancel_after_chunks
        self.done = asyncio.get_running_loop().create_future()
        self.last_ns = 0
        self._pool: ConnectionPool | None = None
        self._conn: Connection | None = None
        self._parser = None
        self._state = _HEAD
        self._sse: SseStream | None = None
        self._raw: list[bytes] = []
        self._body: list[bytes] = []
        self._body_bytes = 0
        self._raw_bytes = 0
        self._content_type = ""
        self._retry_after: str | None = None
        self._length_known = False
        self._pending: list | None = None  # [read_ns, bytes, read_ns, bytes, ...] not parsed yet
        self._read_ns = 0  # timestamp of the read being parsed
        self._interim = False  # the head being parsed is a 1xx: the answer follows it
        self._received = False  # any byte of the answer arrived
        # A kept-alive connection the server closed before a byte of the answer: the request may not
        # have reached it at all (the close raced the write), so the runner sends it once more.
        self.stale = False

    def send(self, pool: ConnectionPool, conn: Connection, request: bytes) -> None:
        """Write the request: the moment of the write is the send time (dispatch lag is measured to it).

        The exchange is the transport's protocol until the end: reads come straight here, not
        through the connection (a call per read costs)."""
        self._pool, self._conn = pool, conn
        self._parser = httptools.HttpResponseParser(self)
        conn.transport.set_protocol(self)
        outcome = self.outcome
        outcome.sent_ns = self.last_ns = self._read_ns = self._clock.now_ns()
        outcome.on_wire = True
        conn.transport.write(request)

    def stop(self, reason: str, detail: str | None = None) -> None:
        """End the request from outside: drop the connection, so the engine sees the client go away."""
        self.parse_pending()  # what arrived before the stop counts
        if self._state == _DONE:
            return
        self.outcome.stop_reason = reason
        self.outcome.fail(reason, detail)
        self._end(False, self._clock.now_ns())

    def abort(self) -> None:
        """Drop the connection at once, unflushed (the worker is exiting: nothing more may be sent)."""
        conn = self._conn
        if conn is not None:
            conn.abort()

    # -- protocol callbacks (the transport's, while the request is open) ----------------------------
    def data_received(self, data: bytes) -> None:
        """Stamp the read (ReadClock's rules) and stash it for parsing after the loop's pass."""
        clock = self._clock
        now = clock.now_ns()
        if now >= clock.next_due_ns:
            clock.on_due()
        if clock.batch_ns == 0:
            clock.begin_pass(now)
        self.last_ns = now = clock.batch_ns
        self._received = True
        pending = self._pending
        if pending is None:
            self._pending = [now, data]
            clock.backlog.append(self)
        else:
            pending.append(now)
            pending.append(data)

    def eof_received(self) -> bool:
        return False  # close our side too; connection_lost follows

    def pause_writing(self) -> None:  # a request is one write; the transport buffers the rest
        pass

    def resume_writing(self) -> None:
        pass

    def parse_pending(self) -> None:
        """Parse the stashed reads in order, each with its own timestamp."""
        pending, self._pending = self._pending, None
        if pending is None:
            return
        conn, feed = self._conn, self._parser.feed_data
        for i in range(0, len(pending), 2):
            if self._state == _DONE:  # bytes after the end of the response: not a reusable connection
                if conn is not None:
                    conn.close()
                return
            self._read_ns = pending[i]
            try:
                feed(pending[i + 1])
            except httptools.HttpParserError as exc:
                if self._state != _DONE:
                    self.outcome.fail("invalid_response", f"HTTP parse error: {exc}"[:200])
                    self._end(False, self._read_ns)

    def connection_lost(self, exc: Exception | None) -> None:
        conn = self._conn
        if conn is not None:
            conn.usable = False
        self.parse_pending()  # the reads before the loss come first
        if self._state == _DONE:
            return
        self._conn = None
        if self._state == _HEAD and not self._received and conn is not None and conn.served:
            self.stale = True
        if self._state in (_SSE, _WHOLE, _ERROR) and not self._length_known and exc is None:
            # a body delimited by the end of the connection is complete
            self._end(False, self._clock.now_ns())
            return
        detail = f"{type(exc).__name__}: {exc}"[:200] if exc else "the server closed the connection"
        self.outcome.fail("connection_reset", detail)
        self._end(False, self._clock.now_ns())

    # -- httptools callbacks ----------------------------------------------------------------------
    def on_header(self, name: bytes, value: bytes) -> None:
        name = name.lower()
        if name == b"content-type":
            self._content_type = value.split(b";", 1)[0].strip().lower().decode("latin-1")
        elif name == b"retry-after":
            self._retry_after = value.decode("latin-1")
        elif name in (b"content-length", b"transfer-encoding"):
            self._length_known = True

    def on_headers_complete(self) -> None:
        outcome = self.outcome
        status = self._parser.get_status_code()
        if 100 <= status < 200 and status != 101:  # 100 Continue, 103 Early Hints: the answer follows
            self._interim = True
            self._content_type, self._retry_after, self._length_known = "", None, False
            return
        outcome.ttfb_ns = self._read_ns - outcome.sent_ns
        outcome.http_status = status
        kind = status_kind(status)
        if kind is not None:
            outcome.retry_after_ms = retry_after_ms(self._retry_after)
            outcome.fail(kind, f"HTTP {status}")
            self._state = _ERROR
        elif self.stream and self._content_type == "text/event-stream":
            self._sse = SseStream(outcome.sent_ns, self._dialect)
            outcome.chunk_offsets_ns = self._sse.chunk_offsets_ns
            self._state = _SSE
        else:
            self._state = _WHOLE

    def on_body(self, body: bytes) -> None:
        state = self._state
        if state == _SSE:
            sse = self._sse
            sse.feed(body, self._read_ns)
            raw = self._raw
            if raw is not None:
                self._raw_bytes += len(body)
                if self._raw_bytes <= MAX_KEPT_ANSWER_BYTES:
                    raw.append(body)
                else:
                    self._raw = None  # a stream this long keeps nothing: no count, no echo from it
            offsets = sse.chunk_offsets_ns
            if len(offsets) > MAX_STAMPED_CHUNKS:  # an endless stream: its first chunks' stamps only
                del offsets[MAX_STAMPED_CHUNKS:]
            if sse.overflow:
                self.outcome.fail("invalid_response", sse.invalid)
                self._end(False, self._read_ns)
                return
            limit = self.cancel_after_chunks
            if limit is not None and len(sse.chunk_offsets_ns) >= limit:
                self.stop("cancelled")
        elif state == _WHOLE:
            self._body.append(body)
            self._body_bytes += len(body)
            if self._body_bytes > MAX_WHOLE_BODY_BYTES:
                self.outcome.fail("invalid_response", f"an answer larger than {MAX_WHOLE_BODY_BYTES >> 20} MB")
                self._end(False, self._read_ns)
        elif state == _ERROR:
            if self._body_bytes < ERROR_KEPT_BYTES:
                self._body.append(body[: ERROR_KEPT_BYTES - self._body_bytes])
            self._body_bytes += len(body)
            if self._body_bytes > ERROR_BODY_LIMIT_BYTES:
                self._end(False, self._read_ns)  # enough of an error page; do not read megabytes of it

    def on_message_complete(self) -> None:
        if self._interim:  # the end of a 1xx head: the parser goes on to the answer
            self._interim = False
            return
        if self._state != _DONE:
            self._end(self._parser.should_keep_alive(), self._read_ns)

    # -- the end ---------------------------------------------------------------------------------
    def _end(self, keep_alive: bool, end_ns: int) -> None:
        state, self._state = self._state, _DONE
        outcome = self.outcome
        if outcome.e2e_ns is None:
            outcome.e2e_ns = end_ns - outcome.sent_ns
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.transport.set_protocol(conn)
            if keep_alive and outcome.stop_reason is None:
                self._pool.release(conn)
            else:
                conn.close()
        if state == _SSE:
            _finish_stream(self._sse, outcome, self._raw)
        elif state == _WHOLE and outcome.error_kind is None:
            _read_whole(b"".join(self._body), self._content_type, outcome, self.stream, self._dialect)
        elif state == _HEAD and outcome.error_kind is None:
            outcome.fail("invalid_response", "the connection ended before a response")
        elif state == _ERROR and self._body:
            outcome.error_detail = b"".join(self._body).decode("utf-8", "replace")
        if self.keep_answer and outcome.error_kind is None and state in (_SSE, _WHOLE):
            kept = self._raw if state == _SSE else self._body
            self.answer = None if kept is None else (kept, state == _SSE)
        self._raw = self._body = None
        if not self.done.done():
            self.done.set_result(outcome)


def _finish_stream(sse: SseStream, outcome: Outcome, raw: list[bytes]) -> None:
    sse.finish(outcome.sent_ns + outcome.e2e_ns)
    first = sse.first_answer if sse.first_answer >= 0 else None
    reported = parse_usage(sse.usage).reasoning_tokens
    timing = stream_timing(sse.chunk_offsets_ns, first, sse.reasoning_chunks, reported)
    outcome.ttft_ns, outcome.ttfo_ns = timing.ttft_ns, timing.ttfo_ns
    outcome.reasoning_tokens, outcome.reasoning_ns = timing.reasoning_tokens, timing.reasoning_ns
    outcome.finish_reason = sse.finish_reason
    outcome.usage = sse.usage
    outcome.tool_calls_count = len(sse.tool_call_ids)
    outcome.response_id = sse.response_id
    if sse.usage is None:
        outcome.response_text_bytes = raw
    if sse.error is not None:
        outcome.fail("stream_error", sse.error)
    elif sse.invalid is not None:
        outcome.fail("invalid_response", sse.invalid)
    elif sse.missing_end() is not None:
        outcome.fail("stream_truncated", f"stream ended without {sse.missing_end()}")


def _read_whole(
    body: bytes, content_type: str, outcome: Outcome, asked_stream: bool, dialect: str = "chat"
) -> None:
    # A whole body has no first token: TTFT stays null (as in the recorder); E2E carries the latency.
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        outcome.fail("invalid_response", f"body is not JSON ({content_type or 'no content type'})")
        return
    if not isinstance(obj, dict):
        outcome.fail("invalid_response", "body is not a JSON object")
        return
    kind = error_object_kind(obj)
    if kind is not None:
        outcome.fail(kind, str(obj["error"])[:200])
        return
    if asked_stream:
        outcome.fail("invalid_response", f"asked for a stream, got {content_type or 'no content type'}")
    outcome.usage = obj.get("usage") if isinstance(obj.get("usage"), dict) else None
    outcome.reasoning_tokens = parse_usage(outcome.usage).reasoning_tokens
    reader = DIALECTS[dialect]
    if reader.typed_events:  # a Responses object or a Messages message: the dialect reads it
        _read_typed_whole(obj, body, outcome, reader)
        return
    choices = obj.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        outcome.finish_reason = choices[0].get("finish_reason")
        message = choices[0].get("message") or {}
        if isinstance(message, dict):
            outcome.tool_calls_count = len(message.get("tool_calls") or ())
        if outcome.usage is None:
            outcome.response_text_bytes = [body]
    elif "data" not in obj:  # embeddings answer with `data`, chat and completions with `choices`
        outcome.fail("invalid_response", "body has neither choices nor data")


def _read_typed_whole(obj: dict, body: bytes, outcome: Outcome, reader) -> None:
    if obj.get("type") == "error":  # an Anthropic error object
        outcome.fail("stream_error", str(obj.get("error"))[:200])
        return
    answer = reader.answer(obj)
    outcome.finish_reason = answer.finish_reason
    outcome.tool_calls_count = len(answer.tool_calls)
    outcome.response_id = answer.response_id
    if outcome.usage is None:
        outcome.response_text_bytes = [body]
    if answer.finish_reason is None and answer.response_id is None:
        outcome.fail("invalid_response", f"body is not a {reader.name} answer")
