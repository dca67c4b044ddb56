"""The incremental SSE splitter (llmreplay/sse.py) and the stream decoders, under arbitrary splits."""

from __future__ import annotations

import gzip
import zlib

import brotli
from hypothesis import given, settings
from hypothesis import strategies as st

from llmreplay.sse import SSESplitter
from recorder.decoding import make_decoder

EVENTS = [b'{"a":1}', b'{"text":"h\xc3\xa9llo \xe2\x82\xac"}', b"line1\nline2", b"[DONE]"]


def wire(newline: bytes) -> bytes:
    """A stream with comments, other fields, multi-line data and the given line ending."""
    n = newline
    return (
        b": keep-alive" + n + n
        + b"event: message" + n + b"id: 1" + n + b"data: " + EVENTS[0] + n + n
        + b"data:" + EVENTS[1] + n + n
        + b"retry: 10" + n + b"data: line1" + n + b"data: line2" + n + n
        + b": comment" + n
        + b"data: " + EVENTS[3] + n + n
    )  # fmt: skip


def split_feed(data: bytes, cuts: list[int]) -> list[bytes]:
    splitter, events, start = SSESplitter(), [], 0
    for cut in sorted(set(cuts)) + [len(data)]:
        events += splitter.feed(data[start:cut])
        start = cut
    return events + splitter.finish()


def test_whole_stream_each_line_ending():
    for newline in (b"\n", b"\r\n", b"\r"):
        assert split_feed(wire(newline), []) == EVENTS, newline


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from([b"\n", b"\r\n", b"\r"]), st.lists(st.integers(min_value=0, max_value=400), max_size=40)
)
def test_random_splits_give_the_same_events(newline, cuts):
    data = wire(newline)
    assert split_feed(data, [c % (len(data) + 1) for c in cuts]) == EVENTS


def test_byte_by_byte_with_crlf_split_between_cr_and_lf():
    data = wire(b"\r\n")
    assert split_feed(data, list(range(len(data)))) == EVENTS


def test_several_events_in_one_read_and_final_event_without_blank_line():
    splitter = SSESplitter()
    assert splitter.feed(b"data: 1\n\ndata: 2\n\ndata: 3") == [b"1", b"2"]
    assert splitter.finish() == [b"3"]


def test_event_without_data_is_not_dispatched():
    assert split_feed(b"event: ping\n\n: hi\n\ndata\n\n", []) == [b""]


@settings(max_examples=100, deadline=None)
@given(
    st.sampled_from(["gzip", "deflate", "br", "zstd"]),
    st.lists(st.integers(min_value=0, max_value=300), max_size=30),
)
def test_compressed_stream_decodes_incrementally(encoding, cuts):
    plain = wire(b"\n") * 3
    encoded = _compress(encoding, plain)
    decode = make_decoder(encoding)
    splitter, events, start = SSESplitter(), [], 0
    for cut in sorted({c % (len(encoded) + 1) for c in cuts}) + [len(encoded)]:
        events += splitter.feed(decode(encoded[start:cut]))
        start = cut
    assert events + splitter.finish() == EVENTS * 3


def test_identity_has_no_decoder_and_unknown_encoding_is_refused():
    assert make_decoder(None) is None and make_decoder("identity") is None
    try:
        make_decoder("compress")
    except ValueError as exc:
        assert "compress" in str(exc)
    else:
        raise AssertionError("an unknown content-encoding must be refused")


def _compress(encoding: str, data: bytes) -> bytes:
    if encoding == "gzip":
        return gzip.compress(data)
    if encoding == "deflate":
        return zlib.compress(data)
    if encoding == "br":
        return brotli.compress(data)
    try:
        from compression import zstd
    except ImportError:
        from backports import zstd
    return zstd.compress(data)
