"""The values each trace column accepts, derived from the schema: a row is checked before it is written.

A writer that only emits rows passed through `bounded_row` never writes a value that Arrow cannot
convert or that the trace readers refuse (negative counts, out-of-range integers, unknown enums).
Pure; it imports nothing but the trace format.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pyarrow as pa

from llmreplay.trace_format import (
    CONTENT_COLUMNS,
    ENUM_COLUMNS,
    MAX_ARRIVAL_US,
    NON_NEGATIVE_COLUMNS,
    SHAPE_COLUMNS,
    UPPER_BOUNDS,
)

FLOAT32_MAX = 3.4028234663852886e38
INVALID_FIELDS = "invalid_fields"

Check = Callable[[object], bool]
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class UnwritableRow(ValueError):
    """A required column holds a value no reader accepts; the row cannot be written at all."""


def int_range(name: str, dtype: pa.DataType) -> tuple[int, int]:
    """The inclusive range a column's integers may take: its Arrow width, and >= 0 where the format says so."""
    bits = dtype.bit_width
    low = 0 if name in NON_NEGATIVE_COLUMNS else -(1 << (bits - 1))
    return low, min((1 << (bits - 1)) - 1, UPPER_BOUNDS.get(name, 1 << 64))


def fits(name: str, value: object) -> bool:
    """Whether `value` may be written to column `name` as it is (None counts for nullable columns)."""
    rule = _RULES[name]
    return rule[1] if value is None else rule[0](value)


def bounded_row(row: dict) -> dict:
    """`row` with every nullable value its column cannot take replaced by None and named in invalid_fields.

    Raises UnwritableRow when a required column is missing or out of range.
    """
    invalid = list(row.get(INVALID_FIELDS) or ())
    for name, (check, nullable) in _RULES.items():
        if name == INVALID_FIELDS or name not in row:
            continue
        value = row[name]
        if value is None:
            if not nullable:
                raise UnwritableRow(f"column '{name}': missing value")
            continue
        if check(value):
            continue
        if not nullable:
            raise UnwritableRow(f"column '{name}': value {_preview(value)} out of range")
        row[name] = None
        if name not in invalid:
            invalid.append(name)
    if invalid:
        row[INVALID_FIELDS] = invalid
    return row


def _preview(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _int_check(low: int, high: int) -> Check:
    return lambda v: type(v) is int and low <= v <= high


def _float_check(dtype: pa.DataType) -> Check:
    limit = FLOAT32_MAX if dtype == pa.float32() else math.inf

    def check(v) -> bool:
        return type(v) in (int, float) and math.isfinite(v) and abs(v) <= limit

    return check


def _is_text(v) -> bool:
    if type(v) is not str:
        return False
    if v.isascii():
        return True
    try:
        v.encode()
    except UnicodeEncodeError:  # lone surrogates: Parquet strings are UTF-8
        return False
    return True


def _list_check(item: Check) -> Check:
    return lambda v: type(v) in (list, tuple) and all(x is not None and item(x) for x in v)


def _value_check(name: str, dtype: pa.DataType) -> Check:
    if name in ENUM_COLUMNS:
        allowed = frozenset(ENUM_COLUMNS[name])
        return lambda v: type(v) is str and v in allowed
    if pa.types.is_boolean(dtype):
        return lambda v: type(v) is bool
    if pa.types.is_integer(dtype):
        return _int_check(*int_range(name, dtype))
    if pa.types.is_timestamp(dtype):
        micros = _int_check(0, MAX_ARRIVAL_US)  # microseconds since the epoch, as TraceRecord holds them
        return lambda v: (
            micros(v) or (isinstance(v, datetime) and v.tzinfo is not None and micros(_micros(v)))
        )
    if pa.types.is_floating(dtype):
        return _float_check(dtype)
    if pa.types.is_string(dtype):
        return _is_text
    if pa.types.is_list(dtype):
        return _list_check(_ITEM_CHECKS.get(name) or _value_check(name, dtype.value_type))
    raise TypeError(f"no value rule for column {name} of type {dtype}")  # a new column type needs one


def _micros(value: datetime) -> int:
    return (value - _EPOCH) // timedelta(microseconds=1)


def _is_message(m) -> bool:
    return isinstance(m, dict) and _is_text(m.get("role")) and _COUNT(m.get("tokens"))


_COUNT = _int_check(0, (1 << 31) - 1)
# list items with rules of their own: message shapes, and offsets that count forward from arrival
_ITEM_CHECKS: dict[str, Check] = {
    "messages": _is_message,
    "chunk_offsets_ns": _int_check(0, UPPER_BOUNDS["chunk_offsets_ns"]),
}
_RULES: dict[str, tuple[Check, bool]] = {
    name: (_value_check(name, dtype), nullable) for name, dtype, nullable in SHAPE_COLUMNS + CONTENT_COLUMNS
}
