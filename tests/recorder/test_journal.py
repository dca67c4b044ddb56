"""Fail open, nothing lost: the journal's write path, its disk budget and write failures, dead letters,
poisoned spools from older versions, and the row check, in-process with real files (and a real
RLIMIT_FSIZE in a child process for the failing disk)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import orjson
import pytest
from live_processes import ROOT

from llmreplay.trace_io import read_trace
from llmreplay.trace_values import UnwritableRow, bounded_row
from recorder.capture import Capture, keep_delivered
from recorder.converter import Converter
from recorder.dead_letter import REASONS, REJECTED_DIR, rejected_ids
from recorder.frames import CAPTURE, HEAD, decode_capture, encode_marker
from recorder.journal import Journal, journal_segments, segment_path
from recorder.journal_tail import read_dead_segment
from recorder.spool import SPOOL_DIR, SpoolSegment
from recorder.writer import recover_spool
from tests.recorder.test_writer import META, converter_spec, finished


def test_a_capture_is_in_the_file_when_submit_returns(tmp_path):
    journal = Journal(tmp_path, "abc", flush_interval_s=1.0, limit_bytes=1 << 30)
    journal.start()
    try:
        assert journal.submit(finished("r1", 1_000))
        # no thread, no wait: the bytes are in the OS before the hook returns to mitmproxy
        frames = read_dead_segment(segment_path(tmp_path, "abc", 1), still_written=True)
        assert [decode_capture(m, b).request_id for k, m, b in frames if k == CAPTURE] == ["r1"]
    finally:
        journal.close()


def test_over_its_disk_budget_the_journal_drops_and_counts_then_resumes(tmp_path, monkeypatch):
    import recorder.journal

    monkeypatch.setattr(recorder.journal, "RETRY_S", 0.05)
    monkeypatch.setattr(recorder.journal, "SEGMENT_S", 0.0)
    size = len(recorder.journal.encode_capture(finished("r0", 0)))
    journal = Journal(tmp_path, "abc", flush_interval_s=0.02, limit_bytes=size * 3 + 100)
    journal.start()
    try:
        results = []
        for i in range(6):
            results.append(journal.submit(finished(f"r{i}", i)))
            journal.tick(0)  # rotates: closed segments count against the budget
            time.sleep(0.05)  # the sync thread measures what is still on disk
        assert results[:3] == [True] * 3 and not any(results[4:])
        assert journal.dropped == results.count(False) and "disk budget" in journal.impaired
        for *_, path in journal_segments(tmp_path)[:-1]:  # the converter catches up
            path.unlink()
        time.sleep(0.15)
        assert journal.submit(finished("after", 99)) and journal.impaired is None
    finally:
        journal.close()


@pytest.mark.e2e
def test_a_failing_disk_drops_whole_captures_and_keeps_the_segment_readable(tmp_path):
    """A real write failure: RLIMIT_FSIZE in a child process makes write() fail past a size (EFBIG)."""
    script = textwrap.dedent(f"""
        import resource, signal, sys
        sys.path[:0] = [{str(ROOT)!r}]
        from pathlib import Path
        from tests.recorder.test_writer import finished
        from recorder.journal import Journal
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        journal = Journal(Path({str(tmp_path / "spool")!r}), "abc", 60.0, 1 << 30)
        journal.start()
        resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, 20_000))
        results = []
        for i in range(40):
            cap = finished(f"r{{i}}", i)
            cap.request_body = b"x" * 1500  # about 2 KB a frame: the limit falls inside one
            results.append(journal.submit(cap))
        print(sum(results), journal.dropped, journal.impaired)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    written, dropped, *why = done.stdout.split()
    assert int(written) > 0 and int(dropped) == 40 - int(written) > 0
    assert "write failed" in " ".join(why)
    frames = read_dead_segment(segment_path(tmp_path / "spool", "abc", 1))  # logs if torn
    assert len([f for f in frames if f[0] == CAPTURE]) == int(written)
    size = segment_path(tmp_path / "spool", "abc", 1).stat().st_size
    assert size == sum(HEAD.size + len(m) + len(b) for _, m, b in frames)  # the torn frame was cut back


def test_a_capture_the_converter_cannot_read_is_dead_lettered_once(tmp_path):
    spool = tmp_path / SPOOL_DIR
    spool.mkdir()
    good = [recorder_frame(finished(f"ok-{i}", (i + 1) * 1_000_000)) for i in range(3)]
    bad = bytearray(recorder_frame(finished("bad-1", 1_500_000)))
    meta_len = HEAD.unpack_from(bad)[1]
    meta = orjson.loads(bytes(bad[HEAD.size : HEAD.size + meta_len]))
    meta["read_bytes"] = [10**9]  # a frame that lies about its reads
    meta_json = orjson.dumps(meta)
    blob = bytes(bad[HEAD.size + meta_len :])
    bad = HEAD.pack(CAPTURE, len(meta_json), len(blob)) + meta_json + blob
    (spool / "raw-dead-000001.frames").write_bytes(good[0] + bad + good[1] + good[2])
    converter = Converter(converter_spec(tmp_path, "abc"))
    converter.recover()
    assert sorted(read_trace(tmp_path).table.column("request_id").to_pylist()) == ["ok-0", "ok-1", "ok-2"]
    assert rejected_ids(spool) == {"bad-1"} and converter.dead_letters.count == 1
    reasons = [orjson.loads(line) for line in (spool / REJECTED_DIR / REASONS).read_bytes().splitlines()]
    assert reasons[0]["request_id"] == "bad-1" and "ValueError" in reasons[0]["reason"]
    assert (spool / REJECTED_DIR / "bad-1.frame").stat().st_mode & 0o777 == 0o600
    os.close(converter._lock_fd)  # as the converter's exit would
    # the live journal of the next run holds it again (say, a restart mid-run): skipped, not retried
    (spool / "raw-abc-000001.frames").write_bytes(bad + encode_marker(b"Z"))
    assert "bad-1" in Converter(converter_spec(tmp_path, "abc")).recover()


def test_a_poisoned_row_spool_of_an_older_version_is_recovered_with_the_value_flagged(tmp_path):
    """Issue #12: a spooled max_tokens 2**31 killed every converter start on that directory."""
    spool_dir = tmp_path / SPOOL_DIR
    spool_dir.mkdir()
    converter = Converter(converter_spec(tmp_path / "scratch", "abc"))
    rows = [converter._build_row(finished(f"r{i}", (i + 1) * 1_000_000), converter.builder) for i in range(3)]
    rows[1]["max_tokens"] = 2**31  # what the old recorder spooled as is
    rows[2]["n"] = 40_000
    segment = SpoolSegment(spool_dir / "trace-1T-abc-9-00001.jsonl")
    segment.append(rows)
    segment.close()
    assert recover_spool(tmp_path, META) == 3
    table = read_trace(tmp_path).table
    flagged = dict(zip(table.column("request_id").to_pylist(), table.column("invalid_fields").to_pylist(), strict=True))
    assert flagged == {"r0": None, "r1": ["max_tokens"], "r2": ["n"]}


@pytest.mark.parametrize(
    "column, value",
    [
        ("max_tokens", 2**31), ("max_tokens", -5), ("n", 40_000), ("seed", 2**64), ("temperature", 1e300),
        ("retry_after_ms", 10**20), ("finish_reason", {"a": 1}), ("model", "bad \udc80 surrogate"),
        ("cached_tokens", -1), ("error_kind", "not-a-kind"), ("top_p", float("nan")),
    ],
)  # fmt: skip
def test_values_no_reader_takes_become_null_and_are_named(column, value):
    row = {**finished_row(), column: value}
    checked = bounded_row(row)
    assert checked[column] is None and checked["invalid_fields"] == [column]


def test_a_required_count_out_of_range_is_clamped_and_named():
    row = bounded_row({**finished_row(), "prompt_tokens": 2**40, "tools_count": 32_768, "tool_calls_count": -1})
    assert (row["prompt_tokens"], row["tools_count"], row["tool_calls_count"]) == (2**31 - 1, 32_767, 0)
    assert sorted(row["invalid_fields"]) == ["prompt_tokens", "tool_calls_count", "tools_count"]


def test_a_required_column_of_the_wrong_kind_is_unwritable():
    with pytest.raises(UnwritableRow, match="prompt_tokens"):
        bounded_row({**finished_row(), "prompt_tokens": "many"})
    with pytest.raises(UnwritableRow, match="endpoint"):
        bounded_row({**finished_row(), "endpoint": None})


def test_server_usage_out_of_range_falls_back_to_the_tokenizer(tmp_path):
    converter = Converter(converter_spec(tmp_path, "abc"))
    cap = finished("r1", 1_000)
    cap.reads = [(cap.reads[0][0], orjson.dumps({"choices": [], "usage": {"prompt_tokens": 2**40}}))]
    row = converter._build_row(cap, converter.builder)
    assert row["token_source"] == "tokenizer" and 0 < row["prompt_tokens"] < 100


def test_an_absurd_retry_after_is_flagged_not_fatal(tmp_path):
    converter = Converter(converter_spec(tmp_path, "abc"))
    for value in ("99999999999999999999", "inf", "nan", "-3"):
        cap = finished("r1", 1_000)
        cap.status, cap.retry_after = 429, value
        row = converter._build_row(cap, converter.builder)
        assert row["retry_after_ms"] is None and row["invalid_fields"] == ["retry_after_ms"], value


def recorder_frame(cap) -> bytes:
    from recorder.frames import encode_capture

    return encode_capture(cap)


def finished_row() -> dict:
    from llmreplay.trace_format import TraceRecord

    return TraceRecord(
        request_id="r", arrival_time=1, endpoint="chat_completions", prompt_tokens=3, token_source="tokenizer"
    ).to_row()


def streamed(request_id: str, arrival_ns: int, words: int) -> Capture:
    cap = finished(request_id, arrival_ns)
    cap.content_type = "text/event-stream"
    chunks = [b'data: {"choices":[{"index":0,"delta":{"content":"w "}}]}\n\n'] * words
    chunks.append(b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n')
    cap.reads = [(arrival_ns + (i + 1) * 1_000_000, data) for i, data in enumerate(chunks)]
    cap.captured_bytes = sum(len(data) for _, data in cap.reads)
    cap.end_ns = arrival_ns + 100_000_000
    return cap


def test_an_http2_row_is_journaled_at_once_and_amended_by_its_hang_up(tmp_path):
    """Issue #12: HTTP/2 rows are in the journal before the client has the end (zero loss under SIGKILL);
    a reset that follows settles them as client_disconnected, cut to what was delivered."""
    spool = tmp_path / SPOOL_DIR
    journal = Journal(spool, "abc", flush_interval_s=0.05, limit_bytes=1 << 30)
    journal.start()
    kept, cut, orphan = streamed("kept", 1_000_000, 5), streamed("cut", 2_000_000, 5), streamed("orphan", 3_000_000, 5)
    for cap in (kept, cut, orphan):
        cap.pending = True
        assert journal.submit(cap)
    assert journal.amend(kept)  # its end was delivered: settled unchanged
    keep_delivered(cut, len(cut.reads[0][1]) * 2)  # the client reset it after two chunks
    cut.outcome, cut.error_msg = "error", "client disconnected (HTTP/2: stream reset by client (CANCEL))"
    assert journal.amend(cut)
    journal.close()  # the orphan's amend never came (the proxy died): it is filed as journaled
    converter = Converter(converter_spec(tmp_path, "def"))  # another run's converter recovers it
    converter.recover()
    rows = {r["request_id"]: r for r in read_trace(tmp_path).table.to_pylist()}
    assert rows["kept"]["error_kind"] is None and len(rows["kept"]["chunk_offsets_ns"]) == 5
    assert rows["cut"]["error_kind"] == "client_disconnected" and len(rows["cut"]["chunk_offsets_ns"]) == 2
    assert rows["cut"]["finish_reason"] is None
    assert rows["orphan"]["error_kind"] is None and rows["orphan"]["finish_reason"] == "stop"
