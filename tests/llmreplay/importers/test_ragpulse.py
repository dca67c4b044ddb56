"""RAGPulse import: string timestamps, two concatenated runs, segment ids turned into chained blocks."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from llmreplay.cli import cli
from llmreplay.importers.ragpulse import COMPONENTS, LENGTH_FILES, RUN_PERIOD_S
from llmreplay.trace_io import read_trace

SHARED = Path(__file__).resolve().parents[3].parent / "shared" / "traces" / "ragpulse"
needs_shared = pytest.mark.skipif(not SHARED.is_dir(), reason=f"public traces not present at {SHARED}")


def run(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def segment_lengths() -> dict[int, int]:
    lengths = {}
    for name, field in LENGTH_FILES.items():
        for row in read_jsonl(SHARED / name):
            lengths[row[field]] = row["token_length"]
    return lengths


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    if not SHARED.is_dir():
        pytest.skip(f"public traces not present at {SHARED}")
    work = tmp_path_factory.mktemp("ragpulse")
    trace, out = work / "t.parquet", work / "out.jsonl"
    assert run("import", "ragpulse", str(SHARED / "0_trace.jsonl"), "-o", str(trace)).exit_code == 0
    assert run("export", "mooncake", str(trace), "-o", str(out)).exit_code == 0
    return read_trace(trace), read_jsonl(out), read_jsonl(SHARED / "0_trace.jsonl")


def test_second_run_follows_the_first_one_week_later(imported):
    trace, exported, source = imported
    restart = next(
        i for i in range(1, len(source)) if int(source[i]["timestamp"]) < int(source[i - 1]["timestamp"])
    )
    assert restart == 3800  # line 3,801
    expected_ms = [
        (int(r["timestamp"]) + (RUN_PERIOD_S if i >= restart else 0)) * 1000 for i, r in enumerate(source)
    ]
    assert [e["timestamp"] for e in exported] == [ms - expected_ms[0] for ms in expected_ms]  # from 0
    assert [(e["input_length"], e["output_length"]) for e in exported] == [
        (r["input_length"], r["output_length"]) for r in source
    ]
    assert trace.meta.extra["run_offsets_s"] == [0, RUN_PERIOD_S]
    assert trace.meta.extra["reordered_rows"] == 0
    assert [e["session_id"] for e in exported] == [r["session_id"] for r in source]


def test_exported_hash_ids_share_exactly_the_prefixes_the_segments_share(imported):
    """Equal id at block k <=> the expanded segment sequences agree on their first (k+1)*512 tokens."""
    trace, exported, source = imported
    lengths = segment_lengths()
    sample = range(0, len(source), 31)  # ~230 rows spread over both runs

    def expanded(row):
        tokens = [h for c in COMPONENTS for h in row["hash_ids"][c] for _ in range(lengths[h])]
        return tokens + [-1] * (row["input_length"] - len(tokens))

    sequences = {i: expanded(source[i]) for i in sample}
    for i in sample:
        assert len(exported[i]["hash_ids"]) == -(-source[i]["input_length"] // 512)
    checked = 0
    for i in sample:
        for j in sample:
            if j <= i:
                continue
            a, b = exported[i]["hash_ids"], exported[j]["hash_ids"]
            for k in range(min(len(a), len(b))):
                end = (k + 1) * 512
                same_prefix = sequences[i][:end] == sequences[j][:end]
                assert (a[k] == b[k]) == same_prefix
                checked += same_prefix
    assert checked > 100  # real sharing (system prompts, passages) was exercised


def test_messages_split_system_prompt_from_the_rest(imported):
    trace, _, source = imported
    lengths = segment_lengths()
    first = next(trace.records())
    system = sum(lengths[h] for h in source[0]["hash_ids"]["sys_prompt"])
    assert [(m.role, m.tokens) for m in first.messages] == [
        ("system", system),
        ("user", first.prompt_tokens - system),
    ]
    assert trace.meta.block_size == 512 and "hash_ids" not in trace.meta.extra  # derived, not source ids


def test_missing_length_files_is_bad_input(tmp_path):
    trace = tmp_path / "0_trace.jsonl"
    trace.write_text(
        json.dumps(
            {"timestamp": "1", "input_length": 5, "output_length": 1, "hash_ids": {}, "session_id": "s"}
        )
    )
    result = run("import", "ragpulse", str(trace), "-o", str(tmp_path / "t.parquet"))
    assert result.exit_code == 2 and "1_sys_prompt.jsonl: missing" in result.stderr


@needs_shared
def test_unknown_segment_id_names_file_line_and_component(tmp_path):
    for name in LENGTH_FILES:
        shutil.copy(SHARED / name, tmp_path / name)
    row = {"timestamp": "3", "input_length": 50, "output_length": 1, "session_id": "s"}
    good = {**row, "hash_ids": {"sys_prompt": [8302], "user_input": [20632]}}
    bad = {**row, "hash_ids": {"sys_prompt": [8302], "passages_ids": [99999999]}}
    trace = tmp_path / "0_trace.jsonl"
    trace.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
    result = run("import", "ragpulse", str(trace), "-o", str(tmp_path / "t.parquet"))
    assert result.exit_code == 2
    assert f"{trace}:2: hash_ids.passages_ids id 99999999 has no token length" in result.stderr
