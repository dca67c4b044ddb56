"""The replay loop's SSE reader on typed streams (Responses, Messages): the learned framing's number
hole (Responses' sequence_number) keeps deltas on the fast path, and never counts what the
reference reading (llmreplay.wire.response.summarize_stream) would not."""

from __future__ import annotations

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from llmreplay.wire.response import summarize_stream
from replayer.loop.sse import SseStream

TEXT = "response.output_text.delta"


def event(kind: str, **fields) -> bytes:
    """vLLM's field order (the openai types, alphabetical), with its `event:` line."""
    return (
        f"event: {kind}\ndata: ".encode()
        + orjson.dumps(dict(sorted({**fields, "type": kind}.items())))
        + b"\n\n"
    )


def delta(text: str, number, kind: str = TEXT) -> bytes:
    fields = {"content_index": 0, "delta": text, "item_id": "msg_1", "logprobs": [], "output_index": 0}
    return event(kind, **fields, sequence_number=number)


def test_deltas_whose_sequence_number_changes_take_the_learned_framing(monkeypatch):
    split_reads = []
    typed_events = SseStream._typed_events
    monkeypatch.setattr(
        SseStream, "_typed_events", lambda s, *a: (split_reads.append(a), typed_events(s, *a))
    )
    sse = SseStream(0, "responses")
    for i in range(1, 50):
        sse.feed(delta(f" w{i}", i), i)
    assert sse.content_chunks == 49
    assert len(split_reads) == 1  # the first delta teaches the framing; the other 48 match it


def reference_stamps(reads: list[bytes]) -> list[int]:
    """The recorder's reading of the same reads: each data payload stamped with its read's index."""
    events = []
    for i, read in enumerate(reads):
        events += [(i, line[6:]) for line in read.split(b"\n") if line.startswith(b"data: ")]
    return list(summarize_stream(events).token_event_ns)


NUMBERS = st.one_of(st.integers(0, 10**12), st.sampled_from([None, "7", -3, 1.5, True, [1], {"n": 1}]))
KINDS = st.sampled_from([TEXT, TEXT, TEXT, "response.reasoning_text.delta", "response.output_text.done"])
EVENTS = st.tuples(st.text(max_size=6), NUMBERS, KINDS).map(lambda args: delta(*args))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(EVENTS, min_size=1, max_size=2).map(b"".join), max_size=12))
def test_a_hole_filled_by_anything_but_digits_is_read_as_the_reference_reads_it(reads):
    """Texts with quotes and backslashes, numbers that are not digits, other event types, two events
    in one read: the stamps are the reference's, whatever the learned framing."""
    sse = SseStream(0, "responses")
    for i, read in enumerate(reads):
        sse.feed(read, i)
    assert list(sse.chunk_offsets_ns) == reference_stamps(reads)
