"""Capture -> TraceRecord: parse, tokenize, hash, classify, link sessions. Runs in the converter process.

Every capture yields exactly one record, whatever is wrong with it; what could not be parsed is
reported back as a problem string (counted, never written).
"""

from __future__ import annotations

import math
from array import array
from collections import OrderedDict
from dataclasses import dataclass

import orjson

from llmreplay.error_kinds import error_kind_for_status
from llmreplay.prefix_hash import prefix_block_hashes
from llmreplay.sse import SSESplitter
from llmreplay.tokenizers import Tokenizer
from llmreplay.trace_format import MessageShape, TraceRecord
from llmreplay.trace_values import fits
from llmreplay.wire.dialects import dialect_for
from llmreplay.wire.response import (
    ResponseShape,
    counted_texts,
    summarize_json,
    summarize_stream,
)
from llmreplay.wire.stream_end import missing_end
from llmreplay.wire.stream_timing import StreamTiming, stream_timing
from recorder.capture import Capture
from recorder.decoding import MAX_DECODED_BYTES, DecodeLimit, decode_body, make_decoder
from recorder.keys import keyed_hash
from recorder.request_shape import ChatMessage, RequestShape, parse_request
from recorder.sessions import SessionLink, SessionTracker

LINK_NEW = object()  # build(): link the capture into its session (the default)
# invalid_fields entry of a row whose request body was not parsed because it is (or decodes to) more
# than max_request_bytes: forwarded untouched, every column the request determines holds its default
REQUEST_OVER_LIMIT = "request_body_over_limit"
RESPONSE_DECODE_FACTOR = 4  # a compressed response is decoded up to this many times max_request_bytes


@dataclass(frozen=True, slots=True)
class BuildSettings:
    tokenizer: Tokenizer
    key: bytes
    block_size: int
    content: bool
    session_from_user: bool
    max_request_bytes: int = MAX_DECODED_BYTES  # request body bytes parsed, as decoded (recorder/decoding.py)


class RecordBuilder:
    def __init__(self, settings: BuildSettings, sessions: SessionTracker):
        self.settings = settings
        self.sessions = sessions
        self.encodings = EncodingCache(settings.tokenizer)

    def build(
        self, cap: Capture, link: SessionLink | None | object = LINK_NEW
    ) -> tuple[TraceRecord, list[str]]:
        """The record of one capture; `link` given (not LINK_NEW): reuse that session link (a rebuild)."""
        problems: list[str] = []
        invalid: list[str] = []
        limit = self.settings.max_request_bytes
        request = _parse_request(cap, problems, self.settings.content, limit, invalid)
        response = _parse_response(cap, problems, limit * RESPONSE_DECODE_FACTOR)
        error_kind = classify_error(cap, request, response)
        tokens = self._count_tokens(request, response, problems)
        answered = error_kind is None and response is not None
        answers = dialect_for(cap.endpoint).echoed_answers(response) if answered else ()
        if link is LINK_NEW:
            link = self._link_session(cap, request, answers)
        if answered and response.response_id:
            self._remember_response(cap, response.response_id, link)
        settings = self.settings
        offsets, timing = _offsets_and_timing(cap, response)
        last_byte = cap.last_byte_ns
        record = TraceRecord(
            request_id=cap.request_id,
            arrival_time=cap.arrival_unix_ns // 1000,
            endpoint=cap.endpoint,
            prompt_tokens=tokens.prompt,
            counted_prompt_tokens=len(tokens.prompt_ids) + tokens.tools,
            token_source=tokens.source,
            session_id=link.session_id if link else None,
            turn_index=link.turn_index if link else 0,
            parent_request_id=link.parent_request_id if link else None,
            think_time_ns=link.think_time_ns if link else None,
            user_id=keyed_hash(settings.key, request.user, "u") if request.user else None,
            api_key_hash=cap.api_key_hash,
            http_status=cap.status,
            error_kind=error_kind,
            retry_after_ms=_retry_after_ms(cap.retry_after) if cap.status == 429 else None,
            completion_tokens=tokens.completion,
            cached_tokens=response.cached_tokens if response else None,
            cache_write_tokens=response.cache_write_tokens if response else None,
            tool_definition_tokens=tokens.tools,
            tool_calls_count=len(response.tool_calls) if response else 0,
            schema_tokens=tokens.schema,
            messages=tokens.messages,
            prefix_block_hashes=tuple(
                prefix_block_hashes(tokens.prompt_ids, settings.block_size, settings.key)
            ),
            ttfb_ns=cap.headers_ns - cap.arrival_ns if cap.headers_ns else None,
            ttft_ns=timing.ttft_ns,
            ttfo_ns=timing.ttfo_ns,
            reasoning_tokens=timing.reasoning_tokens,
            reasoning_ns=timing.reasoning_ns,
            e2e_ns=last_byte - cap.arrival_ns if last_byte and cap.status is not None else None,
            chunk_offsets_ns=offsets,
            finish_reason=response.finish_reason if response else None,
            invalid_fields=tuple(invalid) or None,
            **request.columns,
            **(_response_content(response) if settings.content else {}),
        )
        return record, problems

    def _count_tokens(
        self, request: RequestShape, response: ResponseShape | None, problems: list[str]
    ) -> _Tokens:
        encode = self.encodings.encode
        messages, prompt_ids = (), []
        if request.messages is not None:
            shapes = []
            for message in request.messages:
                ids = encode(message.text) if message.text else []
                shapes.append(MessageShape(message.role, len(ids)))
                prompt_ids.extend(ids)
            messages = tuple(shapes)
        elif request.prompt_token_ids is not None:
            prompt_ids = list(request.prompt_token_ids)
        elif request.prompt_text:
            prompt_ids = encode(request.prompt_text)
        tools = len(encode(request.tools_json)) if request.tools_json else 0
        schema = len(encode(request.schema_json)) if request.schema_json else 0
        server_prompt = response.prompt_tokens if response else None
        if server_prompt is not None and not fits("prompt_tokens", server_prompt):
            problems.append(f"usage.prompt_tokens {server_prompt} out of range; counted with the tokenizer")
            server_prompt = None
        source = "server_usage" if server_prompt is not None else "tokenizer"
        prompt = server_prompt if server_prompt is not None else len(prompt_ids) + tools
        completion = response.completion_tokens if response else None
        if (
            response is not None
            and completion is None
            and source == "tokenizer"
            and _generates(request, response)
        ):
            completion = sum(len(encode(text)) for text in counted_texts(response) if text)
        return _Tokens(prompt, completion, source, tools, schema, messages, prompt_ids)

    def _link_session(
        self, cap: Capture, request: RequestShape, answers: tuple[tuple[ChatMessage, ...], ...]
    ) -> SessionLink | None:
        end_ns = cap.last_byte_ns or cap.arrival_ns
        explicit = cap.session_value or (request.user if self.settings.session_from_user else None)
        state = request.columns.get("server_state")
        if not explicit and state == "conversation":
            explicit = f"conversation\0{request.state_ref}"  # a stored conversation names its session
        if explicit:
            session_id = keyed_hash(self.settings.key, explicit, "s")
            return self.sessions.link_explicit(session_id, cap.request_id, cap.arrival_ns, end_ns)
        if state == "previous_response_id":
            return self.sessions.link_chained(
                cap.request_id, self._response_key(request.state_ref), cap.arrival_ns
            )
        if request.messages is not None and request.messages:
            return self.sessions.link_chat(cap.request_id, request.messages, answers, cap.arrival_ns, end_ns)
        return None

    def _remember_response(self, cap: Capture, response_id: str, link: SessionLink | None) -> None:
        """This answer's id (keyed: the raw id is neither kept nor written), for a later turn chained to it."""
        link = link or SessionLink(cap.request_id)
        end_ns = cap.last_byte_ns or cap.arrival_ns
        self.sessions.remember_response(self._response_key(response_id), link, cap.request_id, end_ns)

    def _response_key(self, response_id: str) -> str:
        return keyed_hash(self.settings.key, response_id, "r")


class EncodingCache:
    """Token ids of recently seen long texts: each chat turn resends the whole history (and system
    prompts repeat across users), so without it tokenizing a conversation costs O(turns^2)."""

    MIN_CHARS = 256  # short texts are cheaper to encode than to look up and keep
    BUDGET_CHARS = 32_000_000

    def __init__(self, tokenizer: Tokenizer):
        self._tokenizer = tokenizer
        self._ids: OrderedDict[str, array] = OrderedDict()
        self._chars = 0

    def encode(self, text: str) -> list[int]:
        if len(text) < self.MIN_CHARS:
            return self._tokenizer.encode(text)
        ids = self._ids.get(text)
        if ids is not None:
            self._ids.move_to_end(text)
            return ids.tolist()
        encoded = self._tokenizer.encode(text)
        self._ids[text] = array("I", encoded)
        self._chars += len(text)
        while self._chars > self.BUDGET_CHARS:
            old, _ = self._ids.popitem(last=False)
            self._chars -= len(old)
        return encoded


@dataclass(frozen=True, slots=True)
class _Tokens:
    prompt: int
    completion: int | None
    source: str
    tools: int
    schema: int
    messages: tuple[MessageShape, ...]
    prompt_ids: list[int]


def _parse_request(
    cap: Capture, problems: list[str], with_content: bool, limit: int, invalid: list[str]
) -> RequestShape:
    if cap.request_error:
        problems.append(cap.request_error)
        return RequestShape()
    body = cap.request_body or b""
    try:
        body = _request_body(body, cap.request_encoding, limit)
    except DecodeLimit as exc:
        problems.append(f"request body not parsed, forwarded untouched: it {exc}")
        invalid.append(REQUEST_OVER_LIMIT)
        return RequestShape()
    try:
        return parse_request(cap.endpoint, body, with_content)
    except ValueError as exc:
        problems.append(str(exc))
    except Exception as exc:  # noqa: BLE001 - a dialect reader tripped on a hostile body: the row still goes
        problems.append(f"request body unreadable ({type(exc).__name__}: {exc})")
    return RequestShape()


def _request_body(body: bytes, encoding: str | None, limit: int) -> bytes:
    """The body to parse: decoded within `limit` (DecodeLimit past it). An encoding that cannot be
    decoded, or a body that is not what it says, is parsed as sent (as mitmproxy's lenient decode did)."""
    if len(body) > limit:
        raise DecodeLimit(f"is {len(body)} bytes, more than {limit} (the recorder's limit)")
    if not encoding:
        return body
    try:
        return decode_body(body, encoding, limit)
    except DecodeLimit:
        raise
    except Exception:  # noqa: BLE001 - an unknown encoding, a corrupt stream: zlib/brotli/zstd share no base
        return body


def _offsets_and_timing(
    cap: Capture, response: ResponseShape | None
) -> tuple[tuple[int, ...] | None, StreamTiming]:
    """A stream's token events as offsets from the arrival, and its first-token times. A whole answer
    has neither; its reasoning tokens are what the usage says."""
    if response is not None and _is_sse(cap):
        offsets = tuple(stamp - cap.arrival_ns for stamp in response.token_event_ns)
        timing = stream_timing(
            offsets, response.first_answer_index, response.reasoning_events, response.reasoning_tokens
        )
        return offsets, timing
    return None, StreamTiming(reasoning_tokens=response.reasoning_tokens if response else None)


def _is_sse(cap: Capture) -> bool:
    return cap.content_type.startswith("text/event-stream")


def _parse_response(cap: Capture, problems: list[str], decode_limit: int) -> ResponseShape | None:
    """None when there is no successful body to read (no response, or an HTTP error status)."""
    if cap.status is None or not 200 <= cap.status < 300:
        return None
    if cap.overflow:
        problems.append(f"response larger than the capture limit ({cap.max_capture_bytes} bytes)")
    try:
        decode = make_decoder(cap.content_encoding, decode_limit)
        if _is_sse(cap):
            return summarize_stream(_stamped_events(cap, decode, problems))
        body = b"".join(decode(data) if decode else data for _, data in cap.reads)
        return summarize_json(body, cap.endpoint)
    except Exception as exc:  # noqa: BLE001 - zlib/brotli/zstd errors have no common base; count and move on
        problems.append(f"response body unreadable ({type(exc).__name__}: {exc})")
        return ResponseShape(invalid_events=1)


def _stamped_events(cap: Capture, decode, problems: list[str]) -> list[tuple[int, bytes]]:
    """Replay the reads through the SSE splitter: each event gets the stamp of the read that completed it.

    A compressed stream that decodes past its bound is read up to there, like one past the capture limit."""
    splitter, events = SSESplitter(), []
    for stamp, data in cap.reads:
        try:
            decoded = decode(data) if decode else data
        except DecodeLimit as exc:
            problems.append(f"response stream read only in part: it {exc}")
            return events
        for payload in splitter.feed(decoded):
            events.append((stamp, payload))
    last = cap.last_byte_ns or cap.arrival_ns
    events.extend((last, payload) for payload in splitter.finish())
    return events


def classify_error(cap: Capture, request: RequestShape, response: ResponseShape | None) -> str | None:
    """The trace's error kind for this request, None for a success."""
    if cap.outcome == "shutdown":
        return "shutdown"
    if cap.outcome == "error":
        message = (cap.error_msg or "").lower()
        if cap.request_body is None and cap.request_error is None:
            return "client_disconnected"  # the request hook never ran: the client stopped sending its body
        if "client disconnected" in message or "reset by client" in message:
            # SDKs hang up as soon as [DONE] arrives, often before the chunked terminator: that is a success;
            # not over HTTP/2, where a client that has read the end cannot reset it (recorder/h2_streams.py)
            complete = response is not None and response.done_seen and not response.stream_error
            complete = complete and not message.startswith("client disconnected (http/2: ")
            return None if complete else "client_disconnected"
        if "timeout" in message or "timed out" in message:
            return "timeout"
        if cap.status is None and not cap.server_connected:
            return "connect_error"
        return "connection_reset"
    kind = error_kind_for_status(cap.status or 0)
    if kind is not None:
        return kind
    if response is None:
        return None
    if response.stream_error:
        return "stream_error"
    if _is_sse(cap):
        if response.invalid_events and not response.token_event_ns:
            return "invalid_response"
        if missing_end(response.done_seen, response.finish_reason) is not None:
            return "stream_truncated"
    elif response.invalid_events:
        return "invalid_response"
    return None


def _generates(request: RequestShape, response: ResponseShape) -> bool:
    return bool(response.text or response.tool_calls or response.token_event_ns)


def _retry_after_ms(value: str | None) -> int | None:
    """Retry-After in ms as the upstream sent it; a value the column cannot hold (nan, inf, negative,
    1e20 s) comes out out of range, so the row check nulls it and names it in invalid_fields."""
    try:
        seconds = float(value) if value else None
    except ValueError:
        return None  # an HTTP-date: rare from inference servers, not worth a date parser here
    if seconds is None:
        return None
    ms = seconds * 1000
    return int(ms) if math.isfinite(ms) else _OUT_OF_RANGE


_OUT_OF_RANGE = 1 << 64  # fits no column: the row check turns it into null + invalid_fields


def _response_content(response: ResponseShape | None) -> dict:
    return {
        "content_response": response.text if response else None,
        "content_tool_calls": orjson.dumps(list(response.tool_calls)).decode()
        if response and response.tool_calls
        else None,
    }
