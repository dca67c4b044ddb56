"""Trace format v1: round trips, and every kind of bad file gives one line naming file, column, row."""

from __future__ import annotations

import json
import subprocess

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from live_processes import llmreplay_cmd

from llmreplay.errors import BadInput
from llmreplay.trace_arrow import trace_schema
from llmreplay.trace_format import METADATA_KEY, MessageShape, TraceMeta, TraceRecord
from llmreplay.trace_io import (
    SeenRequestIds,
    TraceWriter,
    iter_trace_batches,
    read_trace,
    records_to_table,
    write_trace,
)

T0 = 1_700_000_000_000_000


def record(i: int, **changes) -> TraceRecord:
    values = dict(
        request_id=f"r{i}",
        arrival_time=T0 + i * 1000,
        endpoint="chat_completions",
        prompt_tokens=10 + i,
        token_source="tokenizer",
        completion_tokens=5,
        messages=(MessageShape("system", 4), MessageShape("user", 6 + i)),
        prefix_block_hashes=(11, 22 + i),
        ttft_ns=1_000_000,
        e2e_ns=5_000_000,
        chunk_offsets_ns=(1_000_000, 2_000_000, 3_000_000, 4_000_000, 5_000_000),
    )
    values.update(changes)
    return TraceRecord(**values)


def write_raw(path, table: pa.Table, meta: TraceMeta | None = None) -> None:
    meta = meta or TraceMeta(source="test")
    pq.write_table(table.replace_schema_metadata({METADATA_KEY: meta.to_json()}), path)


def good_table(n: int = 3, with_content: bool = False) -> pa.Table:
    return records_to_table([record(i) for i in range(n)], with_content)


def test_round_trip_shape_and_content(tmp_path):
    records = [record(i, content_messages=json.dumps([{"role": "user", "content": "hi"}])) for i in range(3)]
    write_trace(tmp_path / "c.parquet", records, TraceMeta(source="test", content=True))
    trace = read_trace(tmp_path / "c.parquet")
    assert trace.has_content and trace.meta.content
    assert list(trace.records()) == records
    write_trace(tmp_path / "s.parquet", records, TraceMeta(source="test"))
    shape = read_trace(tmp_path / "s.parquet")
    assert not shape.has_content
    assert [r.content_messages for r in shape.records()] == [None] * 3


def test_directory_is_one_trace_sorted_by_arrival(tmp_path):
    part = tmp_path / "trace"
    write_trace(part / "hour=01.parquet", [record(5), record(7)], TraceMeta(source="t"))
    write_trace(part / "hour=00.parquet", [record(1), record(6)], TraceMeta(source="t"))
    trace = read_trace(part)
    assert trace.table.column("request_id").to_pylist() == ["r1", "r5", "r6", "r7"]
    meta, batches = iter_trace_batches(part, batch_size=1)
    assert meta.source == "t"
    assert [b.num_rows for b in batches] == [1, 1, 1, 1]


def test_no_partial_file_on_failure(tmp_path):
    out = tmp_path / "x.parquet"
    with pytest.raises(RuntimeError), TraceWriter(out, TraceMeta(source="t")) as writer:
        writer.write_records([record(0)])
        raise RuntimeError("stage failed mid-write")
    assert list(tmp_path.iterdir()) == []


def test_small_writes_are_gathered_into_row_groups_by_bytes(tmp_path):
    gathered, separate = tmp_path / "gathered.parquet", tmp_path / "separate.parquet"
    with TraceWriter(gathered, TraceMeta(source="t"), row_group_bytes=1 << 20) as writer:
        for i in range(0, 30, 3):
            writer.write_records([record(i), record(i + 1), record(i + 2)])
    with TraceWriter(separate, TraceMeta(source="t")) as writer:
        for i in range(0, 30, 3):
            writer.write_records([record(i), record(i + 1), record(i + 2)])
    assert pq.ParquetFile(gathered).metadata.num_row_groups == 1
    assert pq.ParquetFile(separate).metadata.num_row_groups == 10
    assert read_trace(gathered).table.equals(read_trace(separate).table)


def test_row_groups_close_at_the_byte_bound_and_the_row_bound(tmp_path):
    path = tmp_path / "bounded.parquet"
    with TraceWriter(path, TraceMeta(source="t"), row_group_size=4, row_group_bytes=1 << 20) as writer:
        for i in range(5):
            writer.write_records([record(2 * i), record(2 * i + 1)])
    metadata = pq.ParquetFile(path).metadata
    assert [metadata.row_group(i).num_rows for i in range(metadata.num_row_groups)] == [4, 4, 2]
    with TraceWriter(path, TraceMeta(source="t"), row_group_bytes=1) as writer:  # every write is over
        for i in range(5):
            writer.write_records([record(2 * i), record(2 * i + 1)])
    assert pq.ParquetFile(path).metadata.num_row_groups == 5


def test_no_partial_file_when_gathered_rows_fail_at_close(tmp_path):
    out = tmp_path / "x.parquet"
    writer = TraceWriter(out, TraceMeta(source="t"), row_group_bytes=1 << 20).__enter__()
    writer.write_records([record(0)])
    writer._pending.append(pa.table({"other": [1]}))  # a table the Parquet writer refuses
    with pytest.raises(ValueError):
        writer.__exit__(None, None, None)
    assert list(tmp_path.iterdir()) == []


def expect_error(path, *fragments):
    with pytest.raises(BadInput) as caught:
        read_trace(path)
    message = str(caught.value)
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message, message
    return message


def test_missing_file(tmp_path):
    expect_error(tmp_path / "nope.parquet", "nope.parquet", "no such file")


def test_not_parquet(tmp_path):
    bad = tmp_path / "bad.parquet"
    bad.write_text("timestamp,input\n1,2\n")
    expect_error(bad, "bad.parquet", "not a Parquet file")


def test_parquet_without_our_metadata(tmp_path):
    path = tmp_path / "foreign.parquet"
    pq.write_table(pa.table({"a": [1]}), path)
    expect_error(path, "foreign.parquet", "not an llmreplay trace")


def test_unknown_major_version_is_refused(tmp_path):
    path = tmp_path / "future.parquet"
    write_raw(path, good_table(), TraceMeta(source="t", format_version="2.0"))
    expect_error(path, "future.parquet", "version 2.0", "not supported")


def test_missing_column(tmp_path):
    path = tmp_path / "m.parquet"
    write_raw(path, good_table().drop_columns(["prompt_tokens"]))
    expect_error(path, "m.parquet", "column 'prompt_tokens' is missing")


def test_mistyped_column(tmp_path):
    path = tmp_path / "t.parquet"
    table = good_table()
    index = table.schema.get_field_index("prompt_tokens")
    table = table.set_column(index, "prompt_tokens", pa.array(["10", "11", "12"]))
    write_raw(path, table)
    expect_error(path, "t.parquet", "column 'prompt_tokens'", "type string")


def test_negative_length_names_row(tmp_path):
    path = tmp_path / "n.parquet"
    table = good_table(4)
    index = table.schema.get_field_index("completion_tokens")
    table = table.set_column(index, "completion_tokens", pa.array([5, 5, -3, 5], pa.int32()))
    write_raw(path, table)
    expect_error(path, "n.parquet", "column 'completion_tokens' row 2", "negative value -3")


def test_unsorted_arrivals_name_row(tmp_path):
    path = tmp_path / "u.parquet"
    write_raw(path, records_to_table([record(0), record(2), record(1)], False))
    expect_error(path, "u.parquet", "column 'arrival_time' row 2", "not sorted")


def test_duplicate_ids_within_and_across_files(tmp_path):
    path = tmp_path / "d.parquet"
    write_raw(path, records_to_table([record(0), record(1, request_id="r0")], False))
    expect_error(path, "d.parquet", "column 'request_id' row 1", "duplicate id 'r0'")
    folder = tmp_path / "dir"
    write_trace(folder / "a.parquet", [record(0)], TraceMeta(source="t"))
    write_trace(folder / "b.parquet", [record(3, request_id="r0")], TraceMeta(source="t"))
    expect_error(folder, "b.parquet", "duplicate id 'r0'", "a.parquet")


def test_a_duplicate_across_files_names_both_files_and_rows(tmp_path):
    folder = tmp_path / "dir"
    write_trace(folder / "a.parquet", [record(0), record(1), record(2)], TraceMeta(source="t"))
    write_trace(folder / "b.parquet", [record(3), record(4, request_id="r1")], TraceMeta(source="t"))
    expect_error(folder, "b.parquet: column 'request_id' row 1", "duplicate id 'r1'", "a.parquet row 1")
    _, batches = iter_trace_batches(folder, batch_size=1)  # streamed: r1 was read two files back
    with pytest.raises(BadInput, match=r"b\.parquet: column 'request_id' row 1: .*a\.parquet row 1"):
        list(batches)


def test_a_duplicate_in_an_earlier_batch_of_the_same_file_is_found(tmp_path):
    path = tmp_path / "d.parquet"
    write_trace(path, [record(0), record(1), record(2), record(3, request_id="r1")], TraceMeta(source="t"))
    _, batches = iter_trace_batches(path, batch_size=2)
    with pytest.raises(BadInput, match=r"row 3: duplicate id 'r1' \(first seen in .*d\.parquet row 1\)"):
        list(batches)


def test_hash_collisions_are_never_reported_as_duplicates(tmp_path):
    """With a hash that collides on every id of the same length, only real duplicates are refused."""
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    write_trace(a, [record(0, request_id="x1"), record(1, request_id="y1")], TraceMeta(source="t"))
    write_trace(b, [record(2, request_id="z1"), record(3, request_id="y1")], TraceMeta(source="t"))
    seen = SeenRequestIds(hash_id=len)
    seen.check(a, ["x1", "y1"], 0)  # colliding within one batch
    seen.check(b, ["z1"], 0)  # colliding with earlier batches
    with pytest.raises(BadInput, match=r"row 1: duplicate id 'y1' \(first seen in .*a\.parquet row 1\)"):
        seen.check(b, ["y1"], 1)
    seen = SeenRequestIds(hash_id=len)
    with pytest.raises(BadInput, match=r"row 2: duplicate id 'x1' \(first seen in .*a\.parquet row 0\)"):
        seen.check(a, ["x1", "y1", "x1"], 0)


def test_many_distinct_ids_pass_and_a_late_duplicate_is_caught(tmp_path):
    records = [record(i) for i in range(3000)]
    write_trace(tmp_path / "distinct.parquet", records, TraceMeta(source="t"))
    _, batches = iter_trace_batches(tmp_path / "distinct.parquet", batch_size=256)
    assert sum(batch.num_rows for batch in batches) == 3000
    write_trace(
        tmp_path / "late.parquet", [*records, record(3000, request_id="r1234")], TraceMeta(source="t")
    )
    _, batches = iter_trace_batches(tmp_path / "late.parquet", batch_size=256)
    with pytest.raises(BadInput, match=r"row 3000: duplicate id 'r1234' \(first seen in .* row 1234\)"):
        list(batches)


def test_null_in_required_column(tmp_path):
    path = tmp_path / "null.parquet"
    table = good_table()
    index = table.schema.get_field_index("endpoint")
    table = table.set_column(index, "endpoint", pa.array(["chat_completions", None, "completions"]))
    write_raw(path, table)
    expect_error(path, "null.parquet", "column 'endpoint' row 1", "missing value")


def test_mixed_block_sizes_refused(tmp_path):
    folder = tmp_path / "mixed"
    write_trace(folder / "a.parquet", [record(0)], TraceMeta(source="t", block_size=512))
    write_trace(folder / "b.parquet", [record(1)], TraceMeta(source="t", block_size=16))
    expect_error(folder, "b.parquet", "block size 16")


def test_integer_width_variants_are_accepted(tmp_path):
    path = tmp_path / "wide.parquet"
    table = good_table()
    index = table.schema.get_field_index("prompt_tokens")
    table = table.set_column(index, "prompt_tokens", pa.array([10, 11, 12], pa.int64()))
    write_raw(path, table)
    assert (
        read_trace(path).table.schema.field("prompt_tokens").type
        == trace_schema(False).field("prompt_tokens").type
    )


@pytest.mark.e2e
def test_cli_bad_trace_one_line_exit_2(tmp_path):
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"\x00garbage")
    result = subprocess.run(llmreplay_cmd("inspect", str(bad)), capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "bad.parquet" in result.stderr
    assert "Traceback" not in result.stderr


def test_value_outside_the_vocabulary_names_row(tmp_path):
    path = tmp_path / "e.parquet"
    write_raw(path, records_to_table([record(0), record(1, error_kind="exploded")], False))
    expect_error(path, "e.parquet", "column 'error_kind' row 1", "unknown value 'exploded'")
