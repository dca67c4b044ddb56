"""The trace contract held together: the record's fields are the schema's columns, the docs list them,
every named subset names real columns, and the format module stays free of heavy imports."""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

import pytest

import llmreplay.trace_format as trace_format
from llmreplay.trace_arrow import trace_schema
from llmreplay.trace_format import (
    ADDED_COLUMNS,
    COLUMNS,
    CONTENT_COLUMN_NAMES,
    ENUM_COLUMNS,
    FORMAT_VERSION,
    VALUES_SINCE,
    TraceRecord,
    knows_every_value,
    refusal,
    unknown_value_note,
    value_refusal,
    version_tuple,
)

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "trace-format.md"
LIGHT_IMPORTS = {
    "__future__",
    "dataclasses",
    "datetime",
    "json",
    "typing",
    "llmreplay.error_kinds",
    "llmreplay.wire.endpoints",
}


def test_the_record_fields_are_the_schema_columns_one_to_one():
    fields = dataclasses.fields(TraceRecord)
    schema = trace_schema(with_content=True)
    assert [f.name for f in fields] == schema.names
    assert [f.default is None for f in fields] == [schema.field(f.name).nullable for f in fields]
    assert trace_schema(with_content=False).names == [
        f.name for f in fields if f.name not in CONTENT_COLUMN_NAMES
    ]
    assert schema.names[-len(CONTENT_COLUMN_NAMES) :] == list(CONTENT_COLUMN_NAMES)  # content columns last
    record = TraceRecord(
        request_id="r", arrival_time=1, endpoint="completions", prompt_tokens=0, token_source="imported"
    )
    assert list(record.to_row()) == schema.names


def test_the_docs_list_every_column_with_its_type():
    rows = dict(re.findall(r"^\| `([a-z_0-9]+)` \| ([^|]+?) \|", DOC.read_text(), re.MULTILINE))
    documented = {name: rows.get(name) for name in trace_schema(True).names}
    expected = {c.name: c.type + (", null" if c.nullable else "") for c in COLUMNS}
    assert documented == expected


def test_the_docs_list_every_vocabulary():
    text = DOC.read_text()
    for name, values in ENUM_COLUMNS.items():
        if name != "error_kind":  # error kinds have their own section
            row = re.search(rf"^\| `{name}` \|.*$", text, re.MULTILINE).group(0)
            assert all(f"`{value}`" in row for value in values), name
    assert all(f"`{kind}`" in text for kind in ENUM_COLUMNS["error_kind"])


def test_minor_versions_only_add_nullable_columns():
    for column in COLUMNS:
        assert version_tuple(column.since) <= version_tuple(FORMAT_VERSION), column.name
    assert ADDED_COLUMNS and all(c.nullable for c in COLUMNS if c.name in ADDED_COLUMNS)


def test_every_named_subset_names_real_columns():
    names = set(trace_schema(True).names)
    subsets = {k: v for k, v in vars(trace_format).items() if k.endswith("_COLUMNS") and isinstance(v, tuple)}
    assert len(subsets) >= 10
    for name, subset in subsets.items():
        assert set(subset) <= names and len(set(subset)) == len(subset), name


@pytest.mark.parametrize(
    ("version", "readable", "strict"),
    [("1.0", True, True), (FORMAT_VERSION, True, True), ("1.99", True, False), ("2.0", False, False)],
)
def test_the_version_rule(version, readable, strict):
    assert (refusal(version) is None) == readable
    if readable:
        assert knows_every_value(version) == strict
    else:
        assert refusal(version) == (
            f"trace format version {version} is not supported (this llmreplay reads 1.x); upgrade llmreplay"
        )


def test_the_format_module_imports_nothing_heavy():
    tree = ast.parse(Path(trace_format.__file__).read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level == 0}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    inner = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module == "llmreplay"}
    assert imported - inner <= LIGHT_IMPORTS


def test_a_value_a_later_minor_added_names_the_version_it_needs():
    assert value_refusal("endpoint", "messages", "1.2") == (
        "value 'messages' needs trace format 1.3 (the file says 1.2)"
    )
    assert value_refusal("endpoint", "messages", "1.3") is None
    assert value_refusal("endpoint", "chat_completions", "1.0") is None
    assert all(v in ENUM_COLUMNS[name] for name, added in VALUES_SINCE.items() for v in added)
    assert unknown_value_note("endpoint", "audio_speech", "1.9") == (
        f"endpoint 'audio_speech' is not in trace format {FORMAT_VERSION} (the file is format 1.9): "
        "upgrade llmreplay to one that reads 1.9"
    )
