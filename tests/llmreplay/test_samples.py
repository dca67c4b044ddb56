"""The bundled samples: golden files per format version, the content sample's invariants, the public slices."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from llmreplay.errors import BadInput
from llmreplay.importers.pipeline import ImportConfig, import_trace_file
from llmreplay.trace_format import (
    ADDED_COLUMNS,
    FORMAT_VERSION,
    METADATA_KEY,
    TraceMeta,
    major_version,
    version_tuple,
)
from llmreplay.trace_io import iter_trace_batches, read_trace, records_to_table
from llmreplay.trace_shape import describe_trace
from llmreplay.wire.message_text import message_text

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "samples"
SHARED = ROOT.parent / "shared" / "traces"
GOLDEN = sorted((SAMPLES / "golden").glob("trace-v*.parquet"))

# What each golden file must still read as. Recipes (each written once, never regenerated):
#   v1.0: .venv/bin/python samples/make_content_sample.py --sessions 6 --seed 8 -o samples/golden/trace-v1.0.parquet
#   v1.1: v1.0's rows, with row 3's max_tokens (2**31) and retry_after_ms (10**20) nulled by bounded_row
#   v1.2: v1.1's rows; each streamed answer gets ttfo_ns = chunk_offsets_ns[r], reasoning_tokens = r and
#         reasoning_ns = ttfo_ns - ttft_ns, with r = 8 for session 000 (it reasons) and 0 for the others
#   v1.3: v1.2's rows; session 003 becomes endpoint `messages` (its system message's content moved to
#         content_system, cache_write_tokens = that message's tokens on turn 0 and 0 after, cached_tokens the
#         reverse); session 001 becomes `responses` (instructions in content_system, `input` message items,
#         text.format-style content_response_format) and its turn 1 is chained: server_state
#         previous_response_id, its input and `messages` only the new user turn (after the instructions)
#   v1.4: v1.3's rows; counted_prompt_tokens = the sum of each row's message shapes + tool_definition_tokens
_V1_ROWS = {
    "rows": 21,
    "first_request_id": "chatcmpl-sample-000-00",
    "first_arrival_us": 1_736_931_607_461_250,
    "first_hashes": (4843769503048814885, 1532313346648500582),
    "prompt_tokens_head": [562, 646, 607, 558, 640, 710],
}
GOLDEN_EXPECTED = {  # columns added after a file's version read as nulls, besides these
    "trace-v1.0.parquet": {**_V1_ROWS, "all_null_columns": {"cached_tokens", "content_prompt"}},
    "trace-v1.1.parquet": {
        **_V1_ROWS,
        "all_null_columns": {"cached_tokens", "content_prompt"},
        "invalid_fields": {"chatcmpl-sample-002-00": ["retry_after_ms", "max_tokens"]},
    },
    "trace-v1.2.parquet": {
        **_V1_ROWS,
        "all_null_columns": {"cached_tokens", "content_prompt"},
        "invalid_fields": {"chatcmpl-sample-002-00": ["retry_after_ms", "max_tokens"]},
    },
    "trace-v1.3.parquet": {
        **_V1_ROWS,
        "all_null_columns": {"content_prompt"},
        "invalid_fields": {"chatcmpl-sample-002-00": ["retry_after_ms", "max_tokens"]},
        "endpoints": {"chat_completions": 16, "responses": 2, "messages": 3},
    },
    "trace-v1.4.parquet": {
        **_V1_ROWS,
        "all_null_columns": {"content_prompt"},
        "invalid_fields": {"chatcmpl-sample-002-00": ["retry_after_ms", "max_tokens"]},
        "endpoints": {"chat_completions": 16, "responses": 2, "messages": 3},
        "counted_prompt_tokens_head": [658, 742, 607, 654, 736, 593],
    },
}


def load_sample_script():
    spec = importlib.util.spec_from_file_location("make_content_sample", SAMPLES / "make_content_sample.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def test_there_is_a_golden_file_for_the_current_version():
    assert [p.name for p in GOLDEN] == list(GOLDEN_EXPECTED)
    assert f"trace-v{FORMAT_VERSION}.parquet" in GOLDEN_EXPECTED


@pytest.mark.parametrize("path", GOLDEN, ids=[p.name for p in GOLDEN])
def test_golden_file_reads_back_exactly(path):
    trace = read_trace(path)
    version = re.fullmatch(r"trace-v(.+)\.parquet", path.name).group(1)
    assert trace.meta.format_version == version and major_version(version) == 1
    assert trace.has_content and trace.meta.tokenizer == "mistral-tekken" and trace.meta.block_size == 512
    expected = GOLDEN_EXPECTED[path.name]
    table = trace.table
    assert table.num_rows == expected["rows"]
    first = next(trace.records())
    assert first.request_id == expected["first_request_id"]
    assert first.arrival_time == expected["first_arrival_us"]
    assert first.prefix_block_hashes == expected["first_hashes"]
    assert table.column("prompt_tokens").to_pylist()[:6] == expected["prompt_tokens_head"]
    all_null = {name for name in table.column_names if table.column(name).null_count == table.num_rows}
    added_later = {
        name for name, since in ADDED_COLUMNS.items() if version_tuple(since) > version_tuple(version)
    }
    assert all_null == expected["all_null_columns"] | added_later  # every other column is exercised
    flagged = {r["request_id"]: r["invalid_fields"] for r in table.to_pylist() if r["invalid_fields"]}
    assert flagged == expected.get("invalid_fields", {})
    if "counted_prompt_tokens_head" in expected:
        assert table.column("counted_prompt_tokens").to_pylist()[:6] == expected["counted_prompt_tokens_head"]
    if "endpoints" in expected:
        assert dict(Counter(table.column("endpoint").to_pylist())) == expected["endpoints"]
    rebuilt = records_to_table(trace.records(), with_content=True)
    assert rebuilt.to_pylist() == table.to_pylist()  # typed records lose nothing


def rewrite_golden(path, version: str, tmp_path, endpoint: str = "chat_completions"):
    """The golden file at `path` relabelled `version`, with row 0's endpoint and an extra column as a newer
    writer might have them."""
    raw = pq.read_table(path)
    meta = TraceMeta.from_json(raw.schema.metadata[METADATA_KEY]).replace(format_version=version)
    endpoints = raw.column("endpoint").to_pylist()
    table = raw.set_column(
        raw.schema.get_field_index("endpoint"), "endpoint", pa.array([endpoint, *endpoints[1:]])
    )
    table = table.append_column("future_ns", pa.array(range(table.num_rows), pa.int64()))
    out = tmp_path / f"trace-v{version}.parquet"
    pq.write_table(table.replace_schema_metadata({METADATA_KEY: meta.to_json()}), out)
    return out


def newer_minor() -> str:
    major, minor = version_tuple(FORMAT_VERSION)
    return f"{major}.{minor + 1}"


@pytest.mark.parametrize("path", GOLDEN, ids=[p.name for p in GOLDEN])
def test_a_newer_minor_reads_with_its_new_values_kept_and_new_columns_ignored(path, tmp_path):
    """docs/trace-format.md#versions: this reader meets a file of the next minor version."""
    newer = rewrite_golden(path, newer_minor(), tmp_path, endpoint="audio_speech")
    trace = read_trace(newer)
    assert trace.table.column("endpoint")[0].as_py() == "audio_speech"
    assert "future_ns" not in trace.table.column_names
    assert trace.table.drop_columns(["endpoint"]).equals(read_trace(path).table.drop_columns(["endpoint"]))
    _, batches = iter_trace_batches(newer)
    assert pa.Table.from_batches(list(batches)).column("endpoint")[0].as_py() == "audio_speech"


@pytest.mark.parametrize("path", GOLDEN, ids=[p.name for p in GOLDEN])
def test_an_unknown_value_in_a_file_of_a_known_version_is_refused(path, tmp_path):
    version = re.fullmatch(r"trace-v(.+)\.parquet", path.name).group(1)
    with pytest.raises(BadInput, match=r"column 'endpoint' row 0: unknown value 'audio_speech'"):
        read_trace(rewrite_golden(path, version, tmp_path, endpoint="audio_speech"))
    assert (
        read_trace(rewrite_golden(path, version, tmp_path)).table.num_rows
        == GOLDEN_EXPECTED[path.name]["rows"]
    )


BEFORE_MESSAGES = [p for p in GOLDEN if version_tuple(p.stem.removeprefix("trace-v")) < (1, 3)]


@pytest.mark.parametrize("path", BEFORE_MESSAGES, ids=[p.name for p in BEFORE_MESSAGES])
def test_an_endpoint_of_a_later_minor_in_an_older_file_names_the_version_it_needs(path, tmp_path):
    version = re.fullmatch(r"trace-v(.+)\.parquet", path.name).group(1)
    old = rewrite_golden(path, version, tmp_path, endpoint="messages")
    with pytest.raises(BadInput) as refused:
        read_trace(old)
    assert str(refused.value) == (
        f"{old}: column 'endpoint' row 0: value 'messages' needs trace format 1.3 (the file says {version})"
    )


def test_a_content_file_of_an_older_minor_reads_its_later_content_column_as_nulls():
    trace = read_trace(BEFORE_MESSAGES[-1])  # format 1.2: content_system came with 1.3
    assert trace.has_content and trace.table.column("content_system").null_count == trace.table.num_rows
    _, batches = iter_trace_batches(BEFORE_MESSAGES[-1])
    assert all(b.column("content_system").null_count == b.num_rows for b in batches)


def test_a_newer_major_is_refused_in_one_line(tmp_path):
    newer = rewrite_golden(GOLDEN[-1], "2.0", tmp_path)
    with pytest.raises(BadInput) as refused:
        read_trace(newer)
    assert str(refused.value) == (
        f"{newer}: trace format version 2.0 is not supported (this llmreplay reads 1.x); upgrade llmreplay"
    )


@pytest.fixture(scope="module")
def content_sample():
    return read_trace(SAMPLES / "content_multiturn.parquet")


def test_content_sample_has_the_promised_mix(content_sample):
    records = list(content_sample.records())
    assert content_sample.has_content and len(records) >= 150
    assert {r.stream for r in records} == {True, False}
    assert any(r.tools_count for r in records) and any(r.tool_calls_count for r in records)
    assert any(r.structured_output == "json_schema" and r.schema_tokens > 0 for r in records)
    assert any(r.error_kind == "rate_limited_429" for r in records)
    sessions = {r.session_id for r in records}
    assert len(sessions) == 40 and max(r.turn_index for r in records) >= 5


def test_content_sample_counts_and_hashes_match_its_content(content_sample):
    script = load_sample_script()
    tokenizer = script.load_tokenizer()
    for record in content_sample.records():
        messages = json.loads(record.content_messages)
        ids = [tokenizer.encode(message_text(m)[1]) for m in messages]
        assert [(m.role, m.tokens) for m in record.messages] == [
            (m["role"], len(i)) for m, i in zip(messages, ids, strict=True)
        ]
        assert record.prompt_tokens == sum(len(i) for i in ids) + record.tool_definition_tokens
        flat = [t for i in ids for t in i]
        assert list(record.prefix_block_hashes) == script.prefix_block_hashes(
            flat, 512, script.SAMPLE_HASH_KEY
        )
        if record.content_response is not None:
            assert record.completion_tokens == tokenizer.count(record.content_response)
        if record.content_tool_calls is not None:
            assert record.tool_calls_count == len(json.loads(record.content_tool_calls))


def test_content_sample_sessions_and_timings_are_consistent(content_sample):
    previous = {}
    for record in content_sample.records():
        if record.turn_index == 0:
            assert record.parent_request_id is None and record.think_time_ns is None
        else:
            parent = previous[record.session_id]
            assert (
                record.parent_request_id == parent.request_id and record.turn_index == parent.turn_index + 1
            )
            gap_ns = (record.arrival_time - parent.arrival_time) * 1000 - parent.e2e_ns
            assert abs(gap_ns - record.think_time_ns) < 1000
        if record.stream and record.error_kind is None:
            offsets = record.chunk_offsets_ns
            assert len(offsets) == record.completion_tokens and record.ttft_ns == offsets[0]
            assert record.ttfb_ns < record.ttft_ns <= offsets[-1] < record.e2e_ns
            assert all(b > a for a, b in zip(offsets, offsets[1:], strict=False))
        elif record.error_kind is None:
            assert (
                record.ttft_ns is None and record.chunk_offsets_ns is None and record.ttfb_ns < record.e2e_ns
            )
        previous[record.session_id] = record


@pytest.mark.parametrize(
    ("kind", "raw", "trace"),
    [
        ("mooncake", "mooncake_conversation_head400.jsonl", "mooncake_conversation.parquet"),
        ("burstgpt", "burstgpt_v2_sessions.csv", "burstgpt_v2_sessions.parquet"),
    ],
)
def test_public_samples_are_the_import_of_their_raw_slice(tmp_path, kind, raw, trace):
    fresh = tmp_path / "fresh.parquet"
    import_trace_file(ImportConfig(source=kind, input_path=SAMPLES / "public" / raw, output_path=fresh))
    bundled = read_trace(SAMPLES / trace)
    assert bundled.table.equals(read_trace(fresh).table)
    assert bundled.meta.source == f"import:{kind}:{raw}"
    assert raw in (SAMPLES / "README.md").read_text()


@pytest.mark.skipif(not SHARED.is_dir(), reason=f"public traces not present at {SHARED}")
def test_raw_slices_are_unchanged_heads_of_the_published_files():
    mooncake = (SHARED / "mooncake" / "conversation_trace.jsonl").read_bytes().splitlines(keepends=True)
    assert (SAMPLES / "public" / "mooncake_conversation_head400.jsonl").read_bytes() == b"".join(
        mooncake[:400]
    )
    burstgpt = (SHARED / "burstgpt" / "burstgpt3_slice.csv").read_bytes()
    assert (SAMPLES / "public" / "burstgpt_v2_sessions.csv").read_bytes() == burstgpt


def test_sample_readme_names_every_licence_file():
    readme = (SAMPLES / "README.md").read_text()
    for licence in (SAMPLES / "public").glob("LICENSE-*"):
        assert licence.name in readme
    assert "Apache-2.0" in readme and "CC-BY-4.0" in readme


def test_inspect_names_the_api_mix_and_the_chained_turns():
    shape = describe_trace(read_trace(GOLDEN[-1]).table)
    assert shape["endpoints"] == {"chat_completions": 16, "messages": 3, "responses": 2}
    assert shape["server_state"] == {"previous_response_id": 1}
    assert describe_trace(read_trace(GOLDEN[0]).table)["server_state"] == {}  # read as nulls before 1.3
