"""The values each trace column accepts, derived from llmreplay.trace_format: a row is checked before it is written.

A row passed through `bounded_row` holds no value Arrow cannot convert or a reader refuses. Pure
Python: it imports nothing but the trace format (no pyarrow).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from llmreplay.trace_format import (
    BOOL,
    COLUMNS,
    ENUM_COLUMNS,
    FLOAT32,
    INT16,
    INT32,
    INT64,
    MAX_ARRIVAL_US,
    NON_NEGATIVE_COLUMNS,
    STRING,
    TIMESTAMP,
    UPPER_BOUNDS,
    item_type,
)

FLOAT32_MAX = 3.4028234663852886e38
INT_BITS = {INT16: 16, INT32: 32, INT64: 64}
INVALID_FIELDS = "invalid_fields"

Check = Callable[[object], bool]
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class UnwritableRow(ValueError):
    """A required column holds a value no reader accepts; the row cannot be written at all."""


def int_range(name: str, dtype: str) -> tuple[int, int]:
    """The inclusive range a column's integers may take: its width, and >= 0 where the format says so."""
    bits = INT_BITS[dtype]
    low = 0 if name in NON_NEGATIVE_COLUMNS else -(1 << (bits - 1))
    return low, min((1 << (bits - 1)) - 1, UPPER_BOUNDS.get(name, 1 << 64))


def fits(name: str, value: object) -> bool:
    """Whether `value` may be written to column `name` as it is (None counts for nullable columns)."""
    rule = _RULES[name]
    return rule[1] if value is None else rule[0](value)


def bounded_row(row: dict) -> dict:
    """`row` with every nullable value its column cannot take replaced by None and named in invalid_fields;
    an integer out of a required integer column's range (32,768 tools in an int16 count) is clamped to
    it and named the same way.

    Raises UnwritableRow when a required column is missing or holds a value of the wrong kind.
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
            bounds = _CLAMPS.get(name)
            if bounds is None or type(value) is not int:
                raise UnwritableRow(f"column '{name}': value {_preview(value)} out of range")
            row[name] = min(max(value, bounds[0]), bounds[1])
        else:
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


def _float32(v) -> bool:
    return type(v) in (int, float) and math.isfinite(v) and abs(v) <= FLOAT32_MAX


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


def _value_check(name: str, dtype: str) -> Check:
    if name in ENUM_COLUMNS:
        allowed = frozenset(ENUM_COLUMNS[name])
        return lambda v: type(v) is str and v in allowed
    if dtype == BOOL:
        return lambda v: type(v) is bool
    if dtype in INT_BITS:
        return _int_check(*int_range(name, dtype))
    if dtype == TIMESTAMP:
        micros = _int_check(0, MAX_ARRIVAL_US)  # microseconds since the epoch, as TraceRecord holds them
        return lambda v: (
            micros(v) or (isinstance(v, datetime) and v.tzinfo is not None and micros(_micros(v)))
        )
    if dtype == FLOAT32:
        return _float32
    if dtype == STRING:
        return _is_text
    if item_type(dtype):
        return _list_check(_ITEM_CHECKS.get(name) or _value_check(name, item_type(dtype)))
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
_RULES: dict[str, tuple[Check, bool]] = {c.name: (_value_check(c.name, c.type), c.nullable) for c in COLUMNS}
# required integer columns: a value out of range is clamped into it (and named in invalid_fields)
_CLAMPS = {c.name: int_range(c.name, c.type) for c in COLUMNS if not c.nullable and c.type in INT_BITS}
