"""The gate's flags, declared once for `replay`, `report` and `compare`: one name, one unit, one default.

`--max-dispatch-lag DURATION` (default 5ms) and `--max-error-rate PCT` (default 1%). The defaults
live in replayer.compare.gate_limits; these options only parse what the user wrote (None: not given).
"""

from __future__ import annotations

import click

from llmreplay.errors import BadInput
from replayer.compare.gate_limits import DEFAULT_MAX_DISPATCH_LAG_NS, MAX_ERROR_RATE

MAX_DISPATCH_LAG_HELP = (
    "Fidelity limit: dispatch lag p99 (actual send - scheduled send) above this makes the replay "
    f"unfaithful, exit 1 (default {DEFAULT_MAX_DISPATCH_LAG_NS / 1e6:g}ms)."
)
MAX_ERROR_RATE_HELP = (
    f"Failed requests (4xx, 5xx, broken streams, timeouts) above this share of those sent fail the gate, "
    f"exit 1 (default {MAX_ERROR_RATE:.0%}; 100% turns it off)."
)


def gate_options(command):
    """Adds --max-dispatch-lag and --max-error-rate (parameters max_dispatch_lag, max_error_rate)."""
    command = click.option("--max-error-rate", metavar="PCT", help=MAX_ERROR_RATE_HELP)(command)
    return click.option("--max-dispatch-lag", metavar="DURATION", help=MAX_DISPATCH_LAG_HELP)(command)


def dispatch_lag_ns(text: str | None) -> int | None:
    """A duration with its unit (5ms, 1s): a bare number is refused, seconds and milliseconds both plausible."""
    if text is None:
        return None
    from llmreplay.durations import parse_duration_ns

    return parse_duration_ns(text, "--max-dispatch-lag", bare_unit=None)


def error_rate(text: str | None) -> float | None:
    return None if text is None else parse_share(text, "--max-error-rate", allow_all=True)


def parse_share(text: str, where: str, allow_all: bool = False) -> float:
    """'10%' or '0.1' -> 0.1; 100% (1) only when `allow_all`."""
    raw = text.strip()
    try:
        value = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
    except ValueError:
        raise BadInput(f"{where}: {text!r} is not a share (write 10% or 0.1)") from None
    if not (0 <= value <= 1 if allow_all else 0 <= value < 1):
        upper = "100%" if allow_all else "below 100%"
        raise BadInput(f"{where}: {text!r} must be between 0% and {upper} (write 10% or 0.1)")
    return value
