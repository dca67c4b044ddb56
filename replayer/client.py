"""One HTTP request, timed on the monotonic clock, classified into the trace's error taxonomy.

The per-chunk path only timestamps the read and hands the bytes to the SSE reader. A request
can be stopped from outside (`stop`) to mirror a production cancel or at shutdown.
"""

from __future__ import annotations

import asyncio
import email.utils
import time

import aiohttp
import orjson

from replayer.sse import SseStream

ERROR_BODY_LIMIT_BYTES = 65_536


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
        "e2e_ns",
        "chunk_offsets_ns",
        "finish_reason",
        "usage",
        "tool_calls_count",
        "response_text_bytes",
        "stop_reason",
    )

    def __init__(self, sent_ns: int):
        self.sent_ns = sent_ns  # the call; replaced by the moment the bytes went out (on_wire)
        self.on_wire = False
        self.http_status: int | None = None
        self.error_kind: str | None = None
        self.error_detail: str | None = None  # for logs and the summary, never a secret
        self.retry_after_ms: int | None = None
        self.ttfb_ns: int | None = None
        self.ttft_ns: int | None = None
        self.e2e_ns: int | None = None
        self.chunk_offsets_ns: list[int] | None = None
        self.finish_reason: str | None = None
        self.usage: dict | None = None
        self.tool_calls_count = 0
        self.response_text_bytes: list[bytes] | None = None  # kept only when usage is missing
        self.stop_reason: str | None = None  # "cancelled" or "shutdown" when stopped from outside

    def fail(self, kind: str, detail: str | None = None) -> None:
        if self.error_kind is None:
            self.error_kind = kind
            self.error_detail = detail


async def _on_chunk_sent(session, context, params) -> None:
    """aiohttp writes the buffered headers together with the body: that write is the send."""
    outcome = context.trace_request_ctx
    if not outcome.on_wire:
        outcome.sent_ns = time.perf_counter_ns()
        outcome.on_wire = True


def send_time_tracer() -> aiohttp.TraceConfig:
    """A TraceConfig that stamps each Outcome (passed as trace_request_ctx) when its bytes are written."""
    tracer = aiohttp.TraceConfig()
    tracer.on_request_chunk_sent.append(_on_chunk_sent)
    return tracer


def classify_exception(exc: BaseException) -> str:
    """Map a client-side exception to the error taxonomy."""
    if isinstance(exc, aiohttp.ConnectionTimeoutError | aiohttp.ClientConnectorError):
        return "connect_error"
    if isinstance(exc, asyncio.TimeoutError | TimeoutError):
        return "timeout"
    if isinstance(exc, aiohttp.ClientPayloadError | aiohttp.ServerDisconnectedError):
        return "connection_reset"
    if isinstance(exc, aiohttp.ClientConnectionError | ConnectionError | OSError):
        return "connection_reset"
    return "invalid_response"


def status_kind(status: int) -> str | None:
    if status == 429:
        return "rate_limited_429"
    if 400 <= status < 500:
        return "http_4xx"
    if status >= 500:
        return "http_5xx"
    if status < 200 or status >= 300:
        return "invalid_response"
    return None


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


async def send(
    session: aiohttp.ClientSession,
    url: str,
    body: bytes,
    headers: dict[str, str],
    stream: bool,
    outcome: Outcome,
    cancel_after_chunks: int | None = None,
) -> Outcome:
    """Send and read one request into `outcome` (already holding its send time); never raises
    except CancelledError that was not a planned stop."""
    clock = time.perf_counter_ns
    try:
        async with session.post(url, data=body, headers=headers, trace_request_ctx=outcome) as resp:
            sent_ns = outcome.sent_ns
            outcome.ttfb_ns = clock() - sent_ns
            outcome.http_status = resp.status
            kind = status_kind(resp.status)
            if kind is not None:
                outcome.retry_after_ms = retry_after_ms(resp.headers.get("Retry-After"))
                await resp.content.read(ERROR_BODY_LIMIT_BYTES)
                outcome.e2e_ns = clock() - sent_ns
                outcome.fail(kind, f"HTTP {resp.status}")
                return outcome
            is_sse = resp.content_type == "text/event-stream"
            if stream and is_sse:
                await _read_stream(resp, outcome, cancel_after_chunks)
            else:
                await _read_whole(resp, outcome, stream)
    except asyncio.CancelledError:
        if outcome.stop_reason is None:
            raise
        outcome.e2e_ns = clock() - outcome.sent_ns
        outcome.fail(outcome.stop_reason)
    except Exception as exc:  # every failure of one request is a result row, not a crash
        outcome.e2e_ns = clock() - outcome.sent_ns
        outcome.fail(classify_exception(exc), f"{type(exc).__name__}: {exc}"[:200])
    return outcome


async def _read_stream(
    resp: aiohttp.ClientResponse, outcome: Outcome, cancel_after_chunks: int | None
) -> None:
    clock = time.perf_counter_ns
    sse = SseStream(outcome.sent_ns)
    raw: list[bytes] = []
    outcome.chunk_offsets_ns = sse.chunk_offsets_ns
    readany = resp.content.readany
    feed = sse.feed
    try:
        while data := await readany():
            feed(data, clock())
            raw.append(data)
            if cancel_after_chunks is not None and len(sse.chunk_offsets_ns) >= cancel_after_chunks:
                outcome.stop_reason = "cancelled"
                outcome.e2e_ns = clock() - outcome.sent_ns
                outcome.fail("cancelled")
                resp.close()  # drop the connection: the engine sees the client go away
                break
    except Exception as exc:  # classified here, before the stream checks below could misname it
        outcome.e2e_ns = clock() - outcome.sent_ns
        outcome.fail(classify_exception(exc), f"{type(exc).__name__}: {exc}"[:200])
    finally:
        _finish_stream(sse, outcome, raw)


def _finish_stream(sse: SseStream, outcome: Outcome, raw: list[bytes]) -> None:
    sse.finish()
    if sse.chunk_offsets_ns:
        outcome.ttft_ns = sse.chunk_offsets_ns[0]
    if outcome.e2e_ns is None:
        outcome.e2e_ns = time.perf_counter_ns() - outcome.sent_ns
    outcome.finish_reason = sse.finish_reason
    outcome.usage = sse.usage
    outcome.tool_calls_count = len(sse.tool_call_ids)
    if sse.usage is None:
        outcome.response_text_bytes = raw
    if outcome.stop_reason is not None:
        outcome.fail(outcome.stop_reason)
    elif sse.error is not None:
        outcome.fail("stream_error", sse.error)
    elif sse.invalid is not None:
        outcome.fail("invalid_response", sse.invalid)
    elif not sse.done or sse.finish_reason is None:
        missing = "[DONE]" if not sse.done else "a finish reason"
        outcome.fail("stream_truncated", f"stream ended without {missing}")


async def _read_whole(resp: aiohttp.ClientResponse, outcome: Outcome, asked_stream: bool) -> None:
    # A whole body has no first token: TTFT stays null (as in the recorder); E2E carries the latency.
    body = await resp.content.read()
    outcome.e2e_ns = time.perf_counter_ns() - outcome.sent_ns
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        outcome.fail("invalid_response", f"body is not JSON ({resp.content_type})")
        return
    if not isinstance(obj, dict):
        outcome.fail("invalid_response", "body is not a JSON object")
        return
    if obj.get("error") is not None:
        outcome.fail("stream_error" if asked_stream else "invalid_response", str(obj["error"])[:200])
        return
    if asked_stream:
        outcome.fail("invalid_response", f"asked for a stream, got {resp.content_type or 'no content type'}")
    outcome.usage = obj.get("usage") if isinstance(obj.get("usage"), dict) else None
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
