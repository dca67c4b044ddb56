"""The Arrow schema is the format's descriptors, spelled as Arrow spells them; records survive a table."""

from __future__ import annotations

import dataclasses

from llmreplay.trace_arrow import arrow_type, records_to_table, trace_schema
from llmreplay.trace_format import COLUMNS, TraceRecord
from tests.llmreplay.test_trace_io import record


def _arrow_spelling(descriptor: str) -> str:
    return (
        descriptor.replace("list<", "list<item: ")
        .replace("[us, UTC]", "[us, tz=UTC]")
        .replace("float32", "float")
    )


def test_each_descriptor_is_the_arrow_type_it_names():
    for column in COLUMNS:
        assert str(arrow_type(column.type)) == _arrow_spelling(column.type), column.name
        assert trace_schema(True).field(column.name).type == arrow_type(column.type)


def test_records_survive_a_table_with_and_without_content():
    records = [record(0), record(1, content_response="hi", chunk_offsets_ns=(5, 9), invalid_fields=("seed",))]
    for with_content in (False, True):
        table = records_to_table(records, with_content)
        assert table.schema == trace_schema(with_content)
        back = [TraceRecord.from_row(row) for row in table.to_pylist()]
        assert back == (
            records if with_content else [dataclasses.replace(r, content_response=None) for r in records]
        )
