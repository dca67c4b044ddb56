"""The trace format in Arrow terms: the schema built from llmreplay.trace_format's descriptors, records as tables.

Adding a column or a type is done in trace_format (a descriptor with no row below fails at import).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import pyarrow as pa

if TYPE_CHECKING:
    import numpy as np

from llmreplay.trace_format import (
    BOOL,
    COLUMNS,
    FLOAT32,
    INT16,
    INT32,
    INT64,
    MESSAGE_SHAPE,
    STRING,
    TIMESTAMP,
    TraceRecord,
    item_type,
)

TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")
MESSAGE_SHAPE_TYPE = pa.struct([("role", pa.string()), ("tokens", pa.int32())])
ARROW_TYPES = {
    STRING: pa.string(),
    BOOL: pa.bool_(),
    INT16: pa.int16(),
    INT32: pa.int32(),
    INT64: pa.int64(),
    FLOAT32: pa.float32(),
    TIMESTAMP: TIMESTAMP_TYPE,
    MESSAGE_SHAPE: MESSAGE_SHAPE_TYPE,
}


def float_values(column) -> np.ndarray:
    """A numeric Arrow column (or array) as float64 numpy values, nulls as NaN: what the stages judge with."""
    import numpy as np
    import pyarrow.compute as pc

    return np.asarray(pc.cast(column, pa.float64()).to_numpy(zero_copy_only=False), dtype=float)


def arrow_type(descriptor: str) -> pa.DataType:
    """The Arrow type a trace_format type descriptor stands for."""
    item = item_type(descriptor)
    return pa.list_(arrow_type(item)) if item else ARROW_TYPES[descriptor]


_FIELDS = [pa.field(c.name, arrow_type(c.type), nullable=c.nullable) for c in COLUMNS]
_SHAPE = pa.schema([f for c, f in zip(COLUMNS, _FIELDS, strict=True) if not c.content])
_CONTENT = pa.schema([*_SHAPE, *(f for c, f in zip(COLUMNS, _FIELDS, strict=True) if c.content)])


def trace_schema(with_content: bool) -> pa.Schema:
    """The Arrow schema of a shape trace, or of a content trace when `with_content`."""
    return _CONTENT if with_content else _SHAPE


def records_to_table(records: Iterable[TraceRecord], with_content: bool) -> pa.Table:
    schema = trace_schema(with_content)
    rows = [r.to_row() for r in records]
    if not with_content:
        rows = [{name: row[name] for name in schema.names} for row in rows]
    return pa.Table.from_pylist(rows, schema=schema)
