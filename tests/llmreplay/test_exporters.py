"""Mooncake export of our own traces: dense hash ids, re-blocking, block-size refusal, skips, atomic output."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from llmreplay.cli import cli
from llmreplay.exporters import HashIdMapper, reblock
from llmreplay.prefix_hash import prefix_block_hashes
from llmreplay.trace_format import MessageShape, TraceMeta, TraceRecord
from llmreplay.trace_io import write_trace

KEY = b"test-key-not-secret"
T0_US = 1_736_931_600_000_000  # 2025-01-15 09:00:00 UTC


def run(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def record(n: int, tokens: list[int], block_size: int, **fields) -> TraceRecord:
    values = dict(
        request_id=f"r{n}",
        arrival_time=T0_US + n * 250_000,
        endpoint="chat_completions",
        prompt_tokens=len(tokens),
        token_source="tokenizer",
        completion_tokens=10 + n,
        messages=(MessageShape("user", len(tokens)),),
        prefix_block_hashes=tuple(prefix_block_hashes(tokens, block_size, KEY)),
    )
    values.update(fields)
    return TraceRecord(**values)


def prompts() -> list[list[int]]:
    system = list(range(1000, 1700))  # 700 shared tokens
    return [
        system + [1] * 500,
        system + [1] * 300 + [2] * 50,
        list(range(5000, 5100)),
        system + [1] * 500 + [3] * 9,
    ]


def write(tmp_path: Path, records, block_size: int = 512, **meta) -> Path:
    path = tmp_path / "trace.parquet"
    write_trace(path, records, TraceMeta(source="test", block_size=block_size, **meta))
    return path


def export(trace: Path, out: Path, *flags: str):
    return run("export", "mooncake", str(trace), "-o", str(out), *flags)


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_keyed_hashes_become_dense_ids_in_order_of_first_appearance(tmp_path):
    trace = write(tmp_path, [record(n, p, 512) for n, p in enumerate(prompts())])
    out = tmp_path / "out.jsonl"
    assert export(trace, out).exit_code == 0
    rows = read_jsonl(out)
    assert [r["hash_ids"] for r in rows] == [[0, 1, 2], [0, 3, 4], [5], [0, 1, 6]]
    assert [r["timestamp"] for r in rows] == [
        0,
        250,
        500,
        750,
    ]  # absolute trace: offsets from the first arrival
    assert [r["input_length"] for r in rows] == [len(p) for p in prompts()]
    assert [r["output_length"] for r in rows] == [10, 11, 12, 13]
    assert all("session_id" not in r for r in rows)


def test_relative_trace_counts_from_its_first_request(tmp_path):
    records = [record(n, [7] * 10, 512, arrival_time=3_000_000 + n * 1_000) for n in range(3)]
    out = tmp_path / "out.jsonl"
    assert export(write(tmp_path, records, relative_time=True), out).exit_code == 0
    assert [r["timestamp"] for r in read_jsonl(out)] == [0, 1, 2]  # from 0, whatever the source clock


def test_smaller_blocks_are_reblocked_to_512_exactly(tmp_path):
    trace = write(tmp_path, [record(n, p, 64) for n, p in enumerate(prompts())], block_size=64)
    out = tmp_path / "out.jsonl"
    result = export(trace, out)
    assert result.exit_code == 0 and result.stderr == ""
    assert [r["hash_ids"] for r in read_jsonl(out)] == [[0, 1, 2], [0, 3, 4], [5], [0, 1, 6]]


@settings(max_examples=60, deadline=None)
@given(
    shared=st.integers(0, 1500),
    tails=st.lists(st.integers(0, 900), min_size=2, max_size=2),
    small_block=st.sampled_from([16, 64, 128, 256]),
)
def test_reblocked_hashes_match_direct_512_hashing(shared, tails, small_block):
    """Equal re-blocked hash at k <=> equal directly hashed 512-block prefix at k, same lengths."""
    prefix = list(range(shared))
    a, b = prefix + [1] * tails[0], prefix + [2] * tails[1]
    direct = [prefix_block_hashes(x, 512, KEY) for x in (a, b)]
    mapped = [reblock(prefix_block_hashes(x, small_block, KEY), len(x), small_block, 512) for x in (a, b)]
    assert [len(m) for m in mapped] == [len(d) for d in direct]
    for k in range(min(len(direct[0]), len(direct[1]))):
        assert (mapped[0][k] == mapped[1][k]) == (direct[0][k] == direct[1][k])


def test_mapper_preserves_equality_and_is_dense():
    mapper = HashIdMapper()
    assert mapper([9 << 60, 5, 9 << 60]) == [0, 1, 0]
    assert mapper([5, 77]) == [1, 2]


def test_block_size_that_cannot_be_expressed_is_refused_or_kept_on_request(tmp_path):
    trace = write(tmp_path, [record(0, [1] * 1000, 384)], block_size=384)
    out = tmp_path / "out.jsonl"
    result = export(trace, out)
    assert result.exit_code == 2
    assert "384-token blocks" in result.stderr and "--block-size 384" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not out.exists()
    result = export(trace, out, "--block-size", "384")
    assert result.exit_code == 0
    assert (
        "warning: hash_ids stand for 384-token blocks" in result.stderr
        and "--isl-block-size 384" in result.stderr
    )
    assert read_jsonl(out)[0]["hash_ids"] == [0, 1, 2]


def test_sessions_carry_session_id_and_optionally_delays(tmp_path):
    records = [
        record(0, [1] * 10, 512, session_id="s1"),
        record(
            1,
            [1] * 30,
            512,
            session_id="s1",
            turn_index=1,
            parent_request_id="r0",
            think_time_ns=1_500_250_000,
        ),
        record(2, [2] * 5, 512),
    ]
    trace, out = write(tmp_path, records), tmp_path / "out.jsonl"
    assert export(trace, out).exit_code == 0
    rows = read_jsonl(out)
    assert [r.get("session_id") for r in rows] == ["s1", "s1", None]
    assert all("delay" not in r for r in rows) and [r["timestamp"] for r in rows] == [0, 250, 500]
    assert export(trace, out, "--force", "--session-timing", "delay").exit_code == 0
    rows = read_jsonl(out)
    assert rows[1] == {
        "input_length": 30,
        "output_length": 11,
        "hash_ids": [1],
        "session_id": "s1",
        "delay": 1500.25,
    }
    assert rows[0]["timestamp"] == 0 and rows[2]["timestamp"] == 500


def test_rows_mooncake_cannot_express_are_reported(tmp_path):
    records = [
        record(0, [1] * 10, 512),
        record(1, [1] * 10, 512, completion_tokens=None, error_kind="timeout"),
        record(2, [1] * 10, 512, endpoint="embeddings"),
    ]
    out = tmp_path / "out.jsonl"
    result = export(write(tmp_path, records), out)
    assert result.exit_code == 0
    assert "skipped 2 rows: 1 no completion_tokens recorded; 1 embeddings request" in result.stderr
    assert len(read_jsonl(out)) == 1


def test_bad_trace_and_existing_output(tmp_path):
    out = tmp_path / "out.jsonl"
    result = export(tmp_path / "missing.parquet", out)
    assert result.exit_code == 2 and "no such file" in result.stderr and not out.exists()
    not_parquet = tmp_path / "x.parquet"
    not_parquet.write_text("hello")
    assert export(not_parquet, out).exit_code == 2
    trace = write(tmp_path, [record(0, [1] * 10, 512)])
    out.write_text("keep")
    result = export(trace, out)
    assert result.exit_code == 2 and "--force" in result.stderr and out.read_text() == "keep"
    assert not list(tmp_path.glob(".out.jsonl.tmp-*"))
