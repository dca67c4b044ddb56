"""BurstGPT CSV import (v1; v2 with Session ID and Elapsed time) and its round trip through export."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from llmreplay.cli import cli
from llmreplay.trace_io import read_trace

SHARED = Path(__file__).resolve().parents[3].parent / "shared" / "traces" / "burstgpt"
needs_shared = pytest.mark.skipif(not SHARED.is_dir(), reason=f"public traces not present at {SHARED}")


def run(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def source_rows(path: Path) -> list[dict]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


@needs_shared
@pytest.mark.parametrize("name", ["burstgpt1_slice.csv", "burstgpt3_slice.csv"])
def test_burstgpt_round_trip_keeps_timestamps_lengths_and_sessions(tmp_path, name):
    trace, out = tmp_path / "t.parquet", tmp_path / "out.jsonl"
    result = run("import", "burstgpt", str(SHARED / name), "-o", str(trace))
    assert result.exit_code == 0
    kept = [r for r in source_rows(SHARED / name) if r["Response tokens"] != "0"]
    assert run("export", "mooncake", str(trace), "-o", str(out)).exit_code == 0
    exported = [json.loads(line) for line in out.read_text().splitlines()]
    origin_ms = round(float(kept[0]["Timestamp"]) * 1000)  # the export counts from the first request
    assert [(e["timestamp"], e["input_length"], e["output_length"], e["hash_ids"]) for e in exported] == [
        (round(float(r["Timestamp"]) * 1000) - origin_ms, int(r["Request tokens"]), int(r["Response tokens"]), [])
        for r in kept
    ]
    assert [e.get("session_id") for e in exported] == [r.get("Session ID") or None for r in kept]


@needs_shared
def test_v1_failed_rows_are_reported_with_their_lines(tmp_path):
    result = run("import", "burstgpt", str(SHARED / "burstgpt1_slice.csv"), "-o", str(tmp_path / "t.parquet"))
    assert result.exit_code == 0
    assert "skipped 17 of 400 rows: 17 failed (0 in / 0 out) (lines 22, 40, 42, 43, 83, ...)" in result.stderr
    trace = read_trace(tmp_path / "t.parquet")
    assert trace.table.num_rows == 383
    assert trace.meta.extra["burstgpt_columns"] == "v1"
    assert set(trace.table.column("model").to_pylist()) == {"ChatGPT", "GPT-4"}
    assert trace.meta.relative_time is True


@needs_shared
def test_v2_sessions_get_turns_parents_e2e_and_think_times(tmp_path):
    assert (
        run(
            "import", "burstgpt", str(SHARED / "burstgpt3_slice.csv"), "-o", str(tmp_path / "t.parquet")
        ).exit_code
        == 0
    )
    records = list(read_trace(tmp_path / "t.parquet").records())
    by_id = {r.request_id: r for r in records}
    rows = source_rows(SHARED / "burstgpt3_slice.csv")
    sessions: dict[str, list[int]] = {}
    for index, row in enumerate(rows):
        if row["Session ID"] and row["Response tokens"] != "0":
            sessions.setdefault(row["Session ID"], []).append(index)
    longest = max(sessions.values(), key=len)
    assert len(longest) >= 5
    for turn, index in enumerate(longest):
        record = by_id[f"burstgpt-{index + 2}"]
        assert record.turn_index == turn
        assert record.e2e_ns == int(rows[index]["Elapsed time"]) * 1_000_000_000
        if turn:
            previous = rows[longest[turn - 1]]
            assert record.parent_request_id == f"burstgpt-{longest[turn - 1] + 2}"
            gap_s = (
                float(rows[index]["Timestamp"]) - float(previous["Timestamp"]) - int(previous["Elapsed time"])
            )
            assert record.think_time_ns == max(0, round(gap_s * 1e9))
    assert sum(r.session_id is None for r in records) == sum(not r["Session ID"] for r in rows)


def test_columns_are_read_by_name_not_position(tmp_path):
    header = [
        "Log Type",
        "Response tokens",
        "Model",
        "Elapsed time",
        "Request tokens",
        "Session ID",
        "Timestamp",
        "Total tokens",
    ]
    source = tmp_path / "shuffled.csv"
    with open(source, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerow(["Conversation log", "30", "GPT-4", "4", "100", "s1", "10.0", "130"])
        writer.writerow(["Conversation log", "40", "GPT-4", "5", "200", "s1", "20.5", "240"])
    assert run("import", "burstgpt", str(source), "-o", str(tmp_path / "t.parquet")).exit_code == 0
    first, second = read_trace(tmp_path / "t.parquet").records()
    assert (first.prompt_tokens, first.completion_tokens, first.model, first.e2e_ns) == (
        100,
        30,
        "GPT-4",
        4_000_000_000,
    )
    assert (second.arrival_time, second.turn_index, second.think_time_ns) == (20_500_000, 1, 6_500_000_000)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty file"),
        ("Timestamp,Model,Request tokens\n5,ChatGPT,10\n", ":1: column 'Response tokens' is missing"),
        ("Timestamp,Request tokens,Response tokens\nsoon,10,5\n", ":2: field 'Timestamp' is not a number"),
        (
            "Timestamp,Request tokens,Response tokens\n5,10,2.5\n",
            ":2: field 'Response tokens' is not a whole number",
        ),
        (
            "Timestamp,Request tokens,Response tokens,Elapsed time\n5,10,2,-1\n",
            "field 'Elapsed time' is negative",
        ),
    ],
)
def test_bad_burstgpt_files_exit_2_with_one_line(tmp_path, text, message):
    source = tmp_path / "bad.csv"
    source.write_text(text)
    result = run("import", "burstgpt", str(source), "-o", str(tmp_path / "t.parquet"))
    assert result.exit_code == 2
    assert len(result.stderr.strip().splitlines()) == 1
    assert str(source) in result.stderr and message in result.stderr


def test_only_failed_rows_is_bad_input(tmp_path):
    source = tmp_path / "failed.csv"
    source.write_text("Timestamp,Request tokens,Response tokens\n1,0,0\n2,5,0\n")
    result = run("import", "burstgpt", str(source), "-o", str(tmp_path / "t.parquet"))
    assert result.exit_code == 2
    assert "no importable rows" in result.stderr and "1 failed (0 response tokens) (lines 3)" in result.stderr
