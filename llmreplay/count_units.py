"""Are a trace's message counts and prefix hashes in production's own tokens? Told from the trace alone.

Each recorded row holds production's count (`prompt_tokens`, from the server's usage) and the trace
tokenizer's count of the same prompt without its template (`counted_prompt_tokens`). Fitting
production = rate x counted + overhead x messages + constant over those rows gives the rate: 1 when
the recorder counted with production's tokenizer; otherwise shared prefixes replay at 1/rate of
their production length, since the replay spells them from the trace's counts.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from llmreplay.trace_arrow import float_values

MIN_ROWS = 8  # fewer rows than this: not enough to tell
MIN_COUNTED_TOKENS = 64  # short prompts are mostly template: they tell little about the rate
RATE_TOLERANCE = 0.03  # a rate within 3% of 1 is production's own tokenizer (templates vary a little)


@dataclass(frozen=True, slots=True)
class CountUnits:
    """The fitted rate of production tokens per trace token, and how many rows it rests on."""

    rows: int
    rate: float | None  # None: too few rows with both counts
    tokenizer: str | None

    @property
    def production_units(self) -> bool | None:
        """True: the trace counts in production's tokens; False: it does not; None: cannot tell."""
        return None if self.rate is None else abs(self.rate - 1.0) <= RATE_TOLERANCE

    def as_dict(self) -> dict:
        return {
            "rows": self.rows,
            "rate": None if self.rate is None else round(self.rate, 4),
            "tokenizer": self.tokenizer,
            "production_units": self.production_units,
        }

    def note(self) -> str | None:
        """One line when the trace's counts are not production's tokens; None otherwise."""
        if self.production_units is not False:
            return None
        shorter = 1 - 1 / self.rate
        change = f"{shorter:.0%} shorter" if shorter > 0 else f"{-shorter:.0%} longer"
        return (
            f"the trace counts prompts in {self.tokenizer or 'its tokenizer'}'s tokens, production's engine "
            f"counted {self.rate:.2f} per one ({self.rows} requests): shared prefixes replay about {change} "
            "than production's; record with --tokenizer <production model's tokenizer.json>"
        )


def fit_count_units(
    production: np.ndarray, counted: np.ndarray, messages: np.ndarray, tokenizer: str | None = None
) -> CountUnits:
    """The rate over rows where both counts are known (NaN: unknown) and the counted prompt is not tiny."""
    production = np.asarray(production, dtype=float)
    counted = np.asarray(counted, dtype=float)
    messages = np.asarray(messages, dtype=float)
    usable = np.isfinite(production) & np.isfinite(counted) & (counted >= MIN_COUNTED_TOKENS)
    rows = int(usable.sum())
    if rows < MIN_ROWS:
        return CountUnits(rows, None, tokenizer)
    x, y, m = counted[usable], production[usable], messages[usable]
    columns = [x, np.ones_like(x)]
    if np.ptp(m) > 0:  # the per-message template overhead, when the layouts differ
        columns.insert(1, m)
    solution, *_ = np.linalg.lstsq(np.column_stack(columns), y, rcond=None)
    rate = float(solution[0])
    if not np.isfinite(rate) or rate <= 0:
        return CountUnits(rows, None, tokenizer)
    return CountUnits(rows, rate, tokenizer)


def trace_count_units(table, tokenizer: str | None = None) -> CountUnits:
    """fit_count_units over a trace table's recorded rows (production's count from its usage)."""
    if "counted_prompt_tokens" not in table.column_names:
        return CountUnits(0, None, tokenizer)
    source = np.asarray(table.column("token_source").to_pylist(), dtype=object)
    production = np.where(source == "server_usage", _floats(table.column("prompt_tokens")), np.nan)
    if "message_count" in table.column_names:  # the replay's planning table (replayer.plan.trace_rows)
        messages = _floats(table.column("message_count"))
    else:
        messages = np.asarray([len(m or ()) for m in table.column("messages").to_pylist()], dtype=float)
    return fit_count_units(production, _floats(table.column("counted_prompt_tokens")), messages, tokenizer)


_floats = float_values
