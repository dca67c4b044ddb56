"""Azure LLM inference CSV import (2023 and 2024 timestamp forms) and its round trip through export."""

from __future__ import annotations

import csv
import datetime
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from llmreplay.cli import cli
from llmreplay.importers.azure import parse_timestamp_us
from llmreplay.trace_io import read_trace

SHARED = Path(__file__).resolve().parents[3].parent / "shared" / "traces" / "azure_llm_2023"
needs_shared = pytest.mark.skipif(not SHARED.is_dir(), reason=f"public traces not present at {SHARED}")


def run(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def reference_us(text: str) -> int:
    """Independent parse: datetime for the seconds, digits for the fraction (truncated to µs)."""
    head, _, fraction = text.partition(".")
    zone = 0
    for sign in "+-":
        if sign in fraction:
            fraction, _, offset = fraction.partition(sign)
            hours, minutes = offset.split(":")
            zone = (1 if sign == "+" else -1) * (int(hours) * 3600 + int(minutes) * 60)
    moment = datetime.datetime.strptime(head, "%Y-%m-%d %H:%M:%S").replace(tzinfo=datetime.UTC)
    return (int(moment.timestamp()) - zone) * 1_000_000 + int((fraction + "000000")[:6])


@needs_shared
@pytest.mark.parametrize("name", ["AzureLLMInferenceTrace_code.csv", "AzureLLMInferenceTrace_conv.csv"])
def test_azure_round_trip_keeps_time_offsets_and_lengths(tmp_path, name):
    trace, out = tmp_path / "t.parquet", tmp_path / "out.jsonl"
    assert run("import", "azure", str(SHARED / name), "-o", str(trace)).exit_code == 0
    assert run("export", "mooncake", str(trace), "-o", str(out)).exit_code == 0
    with open(SHARED / name, newline="") as handle:
        source = list(csv.DictReader(handle))
    origin = reference_us(source[0]["TIMESTAMP"])
    expected = [
        {
            "timestamp": (reference_us(r["TIMESTAMP"]) - origin + 500) // 1000,
            "input_length": int(r["ContextTokens"]),
            "output_length": int(r["GeneratedTokens"]),
            "hash_ids": [],
        }
        for r in source
    ]
    assert [json.loads(line) for line in out.read_text().splitlines()] == expected
    meta = read_trace(trace).meta
    assert meta.relative_time is False and meta.extra["prefix_hashes"].startswith("absent")
    assert read_trace(trace).table.column("arrival_time")[0].as_py().isoformat().startswith("2023-11-16T18:")


def test_both_timestamp_forms():
    assert parse_timestamp_us("2023-11-16 18:17:03.9799600", "x") == (1_700_158_623_979_960, False)
    assert parse_timestamp_us("2024-05-10 00:00:00.009930+00:00", "x") == (1_715_299_200_009_930, True)
    assert parse_timestamp_us("2024-05-10 02:00:00.5+02:00", "x") == (1_715_299_200_500_000, True)
    assert parse_timestamp_us("2024-05-10 00:00:00", "x") == (1_715_299_200_000_000, False)


def test_2024_form_file_imports_as_absolute_utc(tmp_path):
    source = tmp_path / "azure2024.csv"
    source.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2024-05-10 00:00:00.009930+00:00,2048,28\n"
        "2024-05-10 00:00:00.041302+00:00,1290,431\n"
    )
    assert run("import", "azure", str(source), "-o", str(tmp_path / "t.parquet")).exit_code == 0
    trace = read_trace(tmp_path / "t.parquet")
    assert [r.arrival_time for r in trace.records()] == [1_715_299_200_009_930, 1_715_299_200_041_302]
    assert "time_zone_assumed" not in trace.meta.extra


def test_missing_timestamps_are_reported_and_skipped(tmp_path):
    source = tmp_path / "gaps.csv"
    source.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:17:03.9799600,10,1\n"
        ",20,2\n"
        "2023-11-16 18:17:04.0000000,0,0\n"
        "2023-11-16 18:17:05.0000000,30,3\n"
    )
    result = run("import", "azure", str(source), "-o", str(tmp_path / "t.parquet"))
    assert result.exit_code == 0
    assert "skipped 2 of 4 rows: 1 no timestamp (lines 3); 1 failed (0 in / 0 out) (lines 4)" in result.stderr
    assert read_trace(tmp_path / "t.parquet").table.column("request_id").to_pylist() == ["azure-2", "azure-5"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty file"),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\n", "header only"),
        (
            "TIMESTAMP,Context,GeneratedTokens\n2023-11-16 18:17:03.97,1,1\n",
            ":1: column 'ContextTokens' is missing",
        ),
        (
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.97,ten,1\n",
            ":2: field 'ContextTokens' is not a number",
        ),
        (
            "TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,1,1\n",
            ":2: field 'TIMESTAMP' is not a date-time",
        ),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-13-16 18:17:03,1,1\n", "not a valid date-time"),
        (
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03,1\n",
            ":2: 2 fields, the header has 3",
        ),
    ],
)
def test_bad_azure_files_exit_2_with_one_line(tmp_path, text, message):
    source = tmp_path / "bad.csv"
    source.write_text(text)
    result = run("import", "azure", str(source), "-o", str(tmp_path / "t.parquet"))
    assert result.exit_code == 2
    assert len(result.stderr.strip().splitlines()) == 1
    assert str(source) in result.stderr and message in result.stderr
    assert not (tmp_path / "t.parquet").exists()


def test_missing_input_file_is_bad_input(tmp_path):
    result = run("import", "azure", str(tmp_path / "nope.csv"), "-o", str(tmp_path / "t.parquet"))
    assert result.exit_code == 2 and "no such file" in result.stderr
