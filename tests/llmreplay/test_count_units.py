"""Whether a trace counts in production's tokens: the fitted rate, from hand-checkable counts."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from llmreplay.count_units import MIN_ROWS, fit_count_units, trace_count_units


def _rows(rate: float, overhead_per_message: float = 5.0, n: int = 40):
    rng = np.random.default_rng(7)
    counted = rng.integers(100, 4000, n).astype(float)
    messages = rng.integers(1, 8, n).astype(float)
    production = np.round(counted * rate + messages * overhead_per_message + 3)
    return production, counted, messages


def test_production_tokenizer_reads_as_production_units():
    units = fit_count_units(*_rows(1.0), tokenizer="hf:model/tokenizer.json")
    assert abs(units.rate - 1.0) < 0.002 and units.production_units and units.note() is None


def test_another_tokenizer_is_named_with_how_much_shorter_prefixes_replay():
    units = fit_count_units(*_rows(1.3), tokenizer="mistral-tekken")
    assert abs(units.rate - 1.3) < 0.002 and units.production_units is False
    assert "mistral-tekken" in units.note() and "23% shorter" in units.note()
    assert "--tokenizer" in units.note()


def test_unknown_counts_and_tiny_prompts_are_left_out():
    production, counted, messages = _rows(1.0, n=MIN_ROWS - 1)
    assert fit_count_units(production, counted, messages).rate is None
    production, counted, messages = _rows(1.0)
    production[:] = np.nan
    assert fit_count_units(production, counted, messages).production_units is None


def test_a_trace_table_fits_only_rows_counted_by_the_server():
    production, counted, messages = _rows(1.25)
    table = pa.table(
        {
            "prompt_tokens": pa.array(production.astype(int), pa.int32()),
            "counted_prompt_tokens": pa.array(counted.astype(int), pa.int32()),
            "token_source": ["server_usage"] * len(production),
            "messages": [[{"role": "user", "tokens": 1}] * int(m) for m in messages],
        }
    )
    assert abs(trace_count_units(table).rate - 1.25) < 0.002
    tokenizer_only = table.set_column(2, "token_source", pa.array(["tokenizer"] * len(production)))
    assert trace_count_units(tokenizer_only).rate is None
    assert trace_count_units(table.drop_columns(["counted_prompt_tokens"])).rows == 0
