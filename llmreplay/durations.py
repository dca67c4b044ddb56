"""Durations in flags, one spelling for every command: 250ms, 600s, 10m, 24h, 2d (and ns, us).

A bare number means seconds where a flag allows it. Values are finite and at most 2**53 ns (about
104 days, the trace format's bound); zero and negative values only where the flag says so.
"""

from __future__ import annotations

import re

from llmreplay.errors import BadInput
from llmreplay.trace_format import MAX_DURATION_NS

UNIT_NS = {
    "ns": 1,
    "us": 1_000,
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60_000_000_000,
    "h": 3_600_000_000_000,
    "d": 86_400_000_000_000,
}
EXAMPLE = "600s, 10m, 24h"
_UNIT_NAMES = {"s": "seconds", "ms": "milliseconds"}
_DURATION = re.compile(r"\s*([+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:e[+-]?\d+)?)\s*(ns|us|ms|s|m|h|d)?\s*")


def parse_duration_ns(
    text: str,
    flag: str,
    *,
    allow_zero: bool = False,
    allow_negative: bool = False,
    bare_unit: str | None = "s",
    max_ns: int = MAX_DURATION_NS,
) -> int:
    """`text` as integer nanoseconds; BadInput naming `flag` when it is not a sensible duration."""
    match = _DURATION.fullmatch(str(text).lower())
    if not match or (match.group(2) is None and bare_unit is None):
        units = ", ".join(UNIT_NS)
        bare = "" if bare_unit is None else f"; a bare number is {_UNIT_NAMES.get(bare_unit, bare_unit)}"
        raise BadInput(f"{flag} {text}: not a duration (write e.g. {EXAMPLE}; units {units}{bare})")
    value_ns = float(match.group(1)) * UNIT_NS[match.group(2) or bare_unit]
    if value_ns < 0 and not allow_negative:
        raise BadInput(f"{flag} {text}: must not be negative")
    if value_ns == 0 and not allow_zero:
        raise BadInput(f"{flag} {text}: must be greater than zero")
    if abs(value_ns) > max_ns:
        raise BadInput(f"{flag} {text}: too long (at most {format_duration(max_ns)})")
    return round(value_ns)


def parse_duration_s(text: str, flag: str, **bounds) -> float:
    """parse_duration_ns in seconds (a float), for settings kept in seconds."""
    return parse_duration_ns(text, flag, **bounds) / 1e9


def format_duration(ns: int) -> str:
    """The largest unit that shows `ns` as a whole number or one decimal: 104d, 10m, 1.5s, 250ms."""
    years = ns / (365.25 * UNIT_NS["d"])
    if abs(years) >= 2:
        return f"{years:.0f} years"
    for unit in ("d", "h", "m", "s", "ms", "us"):
        value = ns / UNIT_NS[unit]
        if abs(value) >= 1:
            return f"{value:.0f}{unit}" if value == int(value) or abs(value) >= 10 else f"{value:.1f}{unit}"
    return f"{ns}ns"
