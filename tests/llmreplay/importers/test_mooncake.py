"""Mooncake import (FAST'25 files and AIPerf's session/delay extension) and its round trip through export."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from llmreplay.cli import cli
from llmreplay.trace_io import read_trace

SHARED = Path(__file__).resolve().parents[3].parent / "shared" / "traces" / "mooncake"
needs_shared = pytest.mark.skipif(not SHARED.is_dir(), reason=f"public traces not present at {SHARED}")


def run(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def write_lines(path: Path, rows) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@needs_shared
@pytest.mark.parametrize("name", ["conversation_trace.jsonl", "synthetic_trace.jsonl"])
def test_mooncake_round_trip_keeps_timestamps_lengths_and_hash_ids(tmp_path, name):
    source = SHARED / name
    trace, out = tmp_path / "t.parquet", tmp_path / "out.jsonl"
    assert run("import", "mooncake", str(source), "-o", str(trace)).exit_code == 0
    assert run("export", "mooncake", str(trace), "-o", str(out)).exit_code == 0
    assert read_jsonl(out) == read_jsonl(source)


@needs_shared
def test_mooncake_import_metadata_and_tied_timestamps_keep_file_order(tmp_path):
    trace_path = tmp_path / "t.parquet"
    result = run("import", "mooncake", str(SHARED / "conversation_trace.jsonl"), "-o", str(trace_path))
    assert result.exit_code == 0
    assert "prefix sharing: block-accurate only" in result.output and "within 512 tokens" in result.output
    trace = read_trace(trace_path)
    meta = trace.meta
    assert meta.source == "import:mooncake:conversation_trace.jsonl"
    assert (meta.block_size, meta.tokenizer, meta.relative_time, meta.clock_domain) == (
        512,
        None,
        True,
        "source",
    )
    assert meta.extra["hash_ids"] == "source_ids"
    assert meta.extra["prefix_hashes"].startswith("block-accurate only")
    ids = trace.table.column("request_id").to_pylist()
    # ~90% of arrivals are tied on 3-second ticks: rows must stay in file order.
    assert ids == [f"mooncake-{n}" for n in range(1, len(ids) + 1)]
    first = next(trace.records())
    assert first.token_source == "imported" and first.stream and first.endpoint == "chat_completions"
    assert [(m.role, m.tokens) for m in first.messages] == [("user", first.prompt_tokens)]
    assert trace.table.column("session_id").null_count == trace.table.num_rows


def test_aiperf_sessions_with_delays_become_turns_with_think_times(tmp_path):
    source = write_lines(
        tmp_path / "sessions.jsonl",
        [
            {
                "session_id": "a",
                "timestamp": 1000,
                "input_length": 600,
                "output_length": 5,
                "hash_ids": [1, 2],
            },
            {"session_id": "b", "timestamp": 1500, "input_length": 10, "output_length": 5, "hash_ids": [9]},
            {"session_id": "a", "delay": 2500, "input_length": 700, "output_length": 6, "hash_ids": [1, 3]},
            {"session_id": "a", "input_length": 800, "output_length": 7, "hash_ids": [1, 3]},
        ],
    )
    trace_path = tmp_path / "t.parquet"
    assert run("import", "mooncake", str(source), "-o", str(trace_path)).exit_code == 0
    records = {r.request_id: r for r in read_trace(trace_path).records()}
    a0, a1, a2 = records["mooncake-1"], records["mooncake-3"], records["mooncake-4"]
    assert (a0.turn_index, a0.parent_request_id, a0.think_time_ns) == (0, None, None)
    assert (a1.turn_index, a1.parent_request_id, a1.think_time_ns) == (1, "mooncake-1", 2_500_000_000)
    assert a1.arrival_time == 3_500_000  # previous arrival + delay (its e2e is unknown)
    assert (a2.turn_index, a2.parent_request_id, a2.think_time_ns) == (
        2,
        "mooncake-3",
        0,
    )  # no delay: at once

    out = tmp_path / "out.jsonl"
    assert (
        run("export", "mooncake", str(trace_path), "-o", str(out), "--session-timing", "delay").exit_code == 0
    )
    rows = read_jsonl(out)
    assert rows[0] == {
        "timestamp": 0,  # from the first request, whatever the source's clock
        "input_length": 600,
        "output_length": 5,
        "hash_ids": [1, 2],
        "session_id": "a",
    }
    assert rows[2] == {
        "input_length": 700,
        "output_length": 6,
        "hash_ids": [1, 3],
        "session_id": "a",
        "delay": 2500,
    }
    assert rows[3]["delay"] == 0 and "timestamp" not in rows[3]

    assert run("export", "mooncake", str(trace_path), "-o", str(out), "--force").exit_code == 0
    assert [r["timestamp"] for r in read_jsonl(out)] == [0, 500, 2500, 2500]


def test_rows_without_timestamp_and_failed_rows_are_reported_and_skipped(tmp_path):
    source = write_lines(
        tmp_path / "gaps.jsonl",
        [
            {"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1]},
            {"input_length": 10, "output_length": 1, "hash_ids": [1]},
            {"timestamp": 5, "input_length": 0, "output_length": 0, "hash_ids": []},
            {"session_id": "s", "delay": 10, "input_length": 10, "output_length": 1},
            {"timestamp": 9, "input_length": 20, "output_length": 2, "hash_ids": [1]},
        ],
    )
    result = run("import", "mooncake", str(source), "-o", str(tmp_path / "t.parquet"))
    assert result.exit_code == 0
    line = result.stderr.strip()
    assert len(line.splitlines()) == 1
    assert "skipped 3 of 5 rows" in line
    assert (
        "1 no timestamp (lines 2)" in line
        and "failed (0 in / 0 out) (lines 3)" in line
        and "(lines 4)" in line
    )
    trace = read_trace(tmp_path / "t.parquet")
    assert trace.table.column("request_id").to_pylist() == ["mooncake-1", "mooncake-5"]
    assert trace.meta.extra["skipped"]["no timestamp"] == {"count": 1, "first_lines": [2]}


def test_unsorted_file_is_sorted_stably_and_reported(tmp_path):
    source = write_lines(
        tmp_path / "unsorted.jsonl",
        [
            {"timestamp": t, "input_length": 1, "output_length": 1, "hash_ids": [i]}
            for i, t in enumerate([5, 1, 5, 1])
        ],
    )
    result = run("import", "mooncake", str(source), "-o", str(tmp_path / "t.parquet"))
    assert result.exit_code == 0 and "2 rows were out of arrival order" in result.stderr
    ids = read_trace(tmp_path / "t.parquet").table.column("request_id").to_pylist()
    assert ids == ["mooncake-2", "mooncake-4", "mooncake-1", "mooncake-3"]


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        ([], "empty file"),
        (["", "   "], "no JSON lines"),
        (['{"timestamp": 0, "input_length": 5, "output_length": 1}', "{not json"], ":2: not valid JSON"),
        (["[1, 2]"], ":1: expected a JSON object"),
        (
            ['{"timestamp": 0, "input_length": "many", "output_length": 1}'],
            ":1: field 'input_length' is not a number",
        ),
        (['{"timestamp": 0, "input_length": -3, "output_length": 1}'], "field 'input_length' is negative"),
        (['{"timestamp": 0, "output_length": 1}'], "field 'input_length' is missing"),
        (
            ['{"timestamp": 0, "input_length": 600, "hash_ids": [1]}'],
            "1 hash_ids for input_length 600, expected 2",
        ),
        (['{"timestamp": 0, "input_length": 6, "hash_ids": ["a"]}'], "'hash_ids' must be a list of integers"),
        (['{"timestamp": 0, "text_input": "hi"}'], "'text_input' rows carry text"),
    ],
)
def test_bad_mooncake_files_exit_2_with_one_line(tmp_path, lines, message):
    source = tmp_path / "bad.jsonl"
    source.write_text("\n".join(lines))
    out = tmp_path / "t.parquet"
    result = run("import", "mooncake", str(source), "-o", str(out))
    assert result.exit_code == 2
    assert len(result.stderr.strip().splitlines()) == 1
    assert str(source) in result.stderr and message in result.stderr
    assert not out.exists() and not list(tmp_path.glob(".t.parquet*"))


def test_block_size_flag_reads_files_with_other_blocks(tmp_path):
    source = write_lines(
        tmp_path / "b16.jsonl",
        [{"timestamp": 0, "input_length": 40, "output_length": 1, "hash_ids": [1, 2, 3]}],
    )
    assert run("import", "mooncake", str(source), "-o", str(tmp_path / "t.parquet")).exit_code == 2
    assert (
        run(
            "import", "mooncake", str(source), "-o", str(tmp_path / "t.parquet"), "--block-size", "16"
        ).exit_code
        == 0
    )
    assert read_trace(tmp_path / "t.parquet").meta.block_size == 16


def test_existing_output_needs_force(tmp_path):
    source = write_lines(tmp_path / "one.jsonl", [{"timestamp": 0, "input_length": 1, "output_length": 1}])
    out = tmp_path / "t.parquet"
    out.write_bytes(b"keep me")
    result = run("import", "mooncake", str(source), "-o", str(out))
    assert result.exit_code == 2 and "--force" in result.stderr and out.read_bytes() == b"keep me"
    assert run("import", "mooncake", str(source), "-o", str(out), "--force").exit_code == 0
    assert read_trace(out).table.num_rows == 1


def test_import_and_export_help():
    assert run("import", "--help").exit_code == 0 and run("export", "--help").exit_code == 0
