"""What keeps a replay's memory flat: the request file read a window ahead (across chunk
boundaries, follow-ups kept when their chunk is dropped, no secret on disk), the result spool
(complete under its name only; frames read back as written), the results sorted bucket by bucket
and the trace's planning columns."""

from __future__ import annotations

import random
import time
from array import array

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from replay_helpers import content_record, write_content_trace

from llmreplay.errors import BadInput
from llmreplay.run_format import RESULT_SCHEMA
from replayer.loop.client import Outcome
from replayer.loop.http_pool import encode_request, parse_endpoint
from replayer.loop.request_file import RequestFileWriter, encode_heads, read_fields, tail_body
from replayer.loop.request_source import RequestSource
from replayer.loop.result_spool import ResultSpool, outcome_of, partial_path, read_spool
from replayer.loop.runner import Sent
from replayer.plan.arrays import NONE, PlanArrays
from replayer.plan.trace_rows import read_trace_rows, stream_records
from replayer.results.merge import WorkerPart, merge_worker_results
from replayer.results.sorted_rows import SortedResultsWriter, bucket_bounds

ENDPOINT = parse_endpoint("http://staging:8000/api")
BASE_HEADERS = (("User-Agent", "llmreplay/test"), ("Authorization", "Bearer sk-SECRET"))
PATHS = ("/v1/chat/completions", "/v1/completions")


def write_requests_file(tmp_path, count: int):
    """`count` requests with bodies of varying size; returns (tails path, fields, bodies)."""
    writer = RequestFileWriter(tmp_path / "r.bin", tmp_path / "r.fields")
    bodies = []
    for i in range(count):
        body = b'{"i": %d, "pad": "%s"}' % (i, b"x" * (i * 37 % 300))
        bodies.append(body)
        headers = [("X-Request-Id", f"r{i}")] + ([("X-Session", f"s{i % 3}")] if i % 2 else [])
        writer.add(PATHS[i % 2], headers, body, bool(i % 3), None if i % 5 == 0 else i, f"m{i % 2}")
    writer.close()
    return tmp_path / "r.bin", read_fields(tmp_path / "r.fields"), bodies


def expected_request(i: int, body: bytes) -> bytes:
    headers = [*BASE_HEADERS, ("X-Request-Id", f"r{i}")] + ([("X-Session", f"s{i % 3}")] if i % 2 else [])
    return encode_request(ENDPOINT, "POST", PATHS[i % 2], headers, body)


def test_request_file_holds_fields_and_bodies_but_no_secret(tmp_path):
    tails, fields, bodies = write_requests_file(tmp_path, 40)
    assert len(fields) == 40
    assert [fields.path(i) for i in range(3)] == [PATHS[0], PATHS[1], PATHS[0]]
    assert [fields.requested(i) for i in range(3)] == [None, 1, 2]
    assert [fields.model(i) for i in range(3)] == ["m0", "m1", "m0"] and fields.streams[:3] == b"\0\1\1"
    offset, length = fields.span(7)
    assert tail_body(tails.read_bytes()[offset : offset + length]) == bodies[7]
    assert b"SECRET" not in tails.read_bytes() and b"SECRET" not in (tmp_path / "r.fields").read_bytes()
    assert not list(tmp_path.glob(".*"))  # no temporary file left


def test_a_bad_header_value_is_bad_input_and_leaves_no_file(tmp_path):
    writer = RequestFileWriter(tmp_path / "r.bin", tmp_path / "r.fields")
    with pytest.raises(BadInput):
        writer.add(PATHS[0], [("X-Request-Id", "evil\r\nX: y")], b"{}", True, 1, "m")
    writer.abort()
    assert list(tmp_path.iterdir()) == []


def test_source_reads_ahead_across_chunk_boundaries_and_keeps_unsent_follow_ups(tmp_path):
    tails, fields, bodies = write_requests_file(tmp_path, 200)
    heads = encode_heads(ENDPOINT, fields, BASE_HEADERS)
    follow_ups = [i for i in range(200) if i % 4 == 3]
    # chunks of ~1 KB (a few requests), 3 KB read ahead: the window moves many times
    source = RequestSource(tails, fields, heads, follow_ups, chunk_bytes=1024, ahead_bytes=3072)
    source._advance()  # what start() does before the thread: the first window
    late = [i for i in follow_ups if 40 <= i < 120]  # sent long after their place in the plan
    for i in range(200):
        if i in late:
            continue
        assert source[i] == expected_request(i, bodies[i]), i
        source._advance()  # what the thread does every POLL_S
        loaded = sum(len(chunk[3]) for chunk in source._chunks)
        assert loaded <= 1024 + 3072 + 2 * 1024 + 400  # a window, never the whole file
    for i in late:
        assert source[i] == expected_request(i, bodies[i]), i
    assert source.loop_reads == 0 and not source._kept
    source.close()


def test_source_falls_back_to_a_read_for_a_request_outside_the_window(tmp_path):
    tails, fields, bodies = write_requests_file(tmp_path, 100)
    heads = encode_heads(ENDPOINT, fields, BASE_HEADERS)
    source = RequestSource(tails, fields, heads, [], chunk_bytes=512, ahead_bytes=512)
    source.start()
    try:
        assert source[99] == expected_request(99, bodies[99])
        assert source[0] == expected_request(0, bodies[0])  # a head that waited: read on the loop
        assert source.loop_reads >= 1
    finally:
        source.close()


def plans(count: int) -> PlanArrays:
    """`count` session-less plans, 10 ns apart."""
    none = array("q", [NONE] * count)
    offsets = array("q", range(0, 10 * count, 10))
    return PlanArrays(
        array("q", range(count)), array("q", bytes(8 * count)), offsets, none, none, none, none, bytes(count)
    )


def plan(index: int):
    return plans(index + 1)[index]


def test_spool_round_trips_outcomes_and_appears_only_when_closed(tmp_path):
    spool = ResultSpool(tmp_path / "results-0.marshal")
    outcomes = []
    for i in range(70):  # more than two frames
        out = Outcome(1_000 + i)
        out.http_status, out.e2e_ns, out.ttft_ns = 200, 5_000, 2_000
        out.chunk_offsets_ns = array("q", [2_000 + k for k in range(i % 5)])
        out.usage = {"prompt_tokens": i, "prompt_tokens_details": {"cached_tokens": 1}}
        outcomes.append(out)
        spool.append(Sent(plan(i), 900 + i, out))
    spool.append(Sent(plan(70), 1_600, None, shed=True))
    assert not spool.path.exists() and partial_path(spool.path).exists()
    spool.close()
    assert spool.path.exists() and not partial_path(spool.path).exists()
    items = [values for frame in read_spool(spool.path) for values in frame]
    assert [v[:2] for v in items] == [(i, 900 + i) for i in range(70)] + [(70, 1_600)]
    assert outcome_of(items[70]) is None
    for values, out in zip(items, outcomes, strict=False):
        back = outcome_of(values)
        assert (back.sent_ns, back.http_status, back.usage) == (out.sent_ns, 200, out.usage)
        assert back.chunk_offsets_ns == out.chunk_offsets_ns


def test_a_worker_that_died_leaves_its_requests_absent(tmp_path):
    tails, fields, _ = write_requests_file(tmp_path, 3)
    spool = ResultSpool(tmp_path / "results-0.marshal")
    for i in range(3):
        spool.append(Sent(plan(i), 0, None, shed=True))
    spool._flush()  # frames on disk under the partial name, never closed: the worker was killed
    part = WorkerPart(0, spool.path, tmp_path / "r.fields", tails, plans(3))
    out = tmp_path / "results.parquet"
    assert merge_worker_results([part], [], 0, None, out, tmp_path) == 0
    assert pq.read_table(out).num_rows == 0


def test_trace_rows_of_a_multi_file_trace_are_in_arrival_order_and_stream_back_by_row(tmp_path):
    late = [content_record(i, 1_000.0 + i) for i in range(3)]
    early = [content_record(i + 3, float(i)) for i in range(3)]
    write_content_trace(tmp_path / "trace" / "a.parquet", late)  # file order: late rows first
    write_content_trace(tmp_path / "trace" / "b.parquet", early)
    rows = read_trace_rows(tmp_path / "trace")
    assert rows.table.column("request_id").to_pylist() == ["r3", "r4", "r5", "r0", "r1", "r2"]
    assert rows.row.tolist() == [3, 4, 5, 0, 1, 2] and rows.meta.content and rows.has_content.all()
    assert rows.table.column("arrival_time").to_pylist()[:3] == [r.arrival_time for r in early]
    streamed = list(stream_records(tmp_path / "trace", [1, 4]))
    assert [(row, rec.request_id) for row, rec in streamed] == [(1, "r1"), (4, "r4")]
    assert streamed[0][1].content_messages == late[1].content_messages


def test_results_sorted_bucket_by_bucket_match_one_global_sort(tmp_path):
    rng = random.Random(5)
    offsets = array("q", sorted(rng.randrange(0, 50) * 1_000 for _ in range(500)))  # many ties
    required = dict(turn_index=0, arrival_time=0, endpoint="chat_completions", stream=True, tools_count=0)
    required.update(
        structured_output="none", source_request_id="x", copy_index=0, worker=0, session_wait_ns=0
    )
    required.update(warmup=False, loop=0)  # never null (run format 1.4)
    rows = [{"request_id": f"r{rng.randrange(10**6)}", "scheduled_offset_ns": o, **required} for o in offsets]
    rng.shuffle(rows)  # completion order
    bounds = bucket_bounds([offsets[:200], offsets[200:]], rows_per_bucket=60)
    assert len(bounds) > 3
    out = tmp_path / "results.parquet"
    writer = SortedResultsWriter(out, RESULT_SCHEMA, bounds, tmp_path)
    for at in range(0, len(rows), 70):
        writer.write(pa.Table.from_pylist(rows[at : at + 70], schema=RESULT_SCHEMA))
    writer.close()
    table = pq.read_table(out)
    assert table.schema.remove_metadata() == RESULT_SCHEMA and writer.rows == 500
    expected = sorted(rows, key=lambda r: (r["scheduled_offset_ns"], r["request_id"]))
    got = table.select(["request_id", "scheduled_offset_ns"]).to_pylist()
    assert got == [
        {"request_id": r["request_id"], "scheduled_offset_ns": r["scheduled_offset_ns"]} for r in expected
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.parquet"]  # buckets removed


def test_the_reader_thread_refills_the_window_when_the_loop_wakes_it(tmp_path):
    tails, fields, bodies = write_requests_file(tmp_path, 300)
    heads = encode_heads(ENDPOINT, fields, BASE_HEADERS)
    source = RequestSource(tails, fields, heads, [], chunk_bytes=1024, ahead_bytes=4096)
    source.start()
    try:
        for i in range(300):
            advances = source.advances
            assert source[i] == expected_request(i, bodies[i]), i
            woken = source._refill_at == len(fields)  # this access asked the thread for more
            deadline = time.monotonic() + 5
            while woken and source.advances == advances and time.monotonic() < deadline:
                time.sleep(0.001)
        assert source.loop_reads == 0 and source.advances > 10
    finally:
        source.close()
