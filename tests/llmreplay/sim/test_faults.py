"""The fault table: every row is reachable by the header, names a real flag, and draws as configured."""

from __future__ import annotations

import dataclasses
import random

import pytest

from llmreplay.sim.config import SimConfig
from llmreplay.sim.faults import (
    DELAY,
    FAULTS,
    IMMEDIATE,
    STREAM,
    draw_fault,
    immediate_error,
    parse_fault_header,
)
from llmreplay.sim.openai_request import InvalidRequest

FIELDS = {f.name for f in dataclasses.fields(SimConfig)}


@pytest.mark.parametrize("row", FAULTS, ids=lambda r: r.name)
def test_each_row_is_reachable_by_the_header_and_names_a_real_flag(row):
    fault = parse_fault_header("slow:250" if row.phase == DELAY else f" {row.name} ")
    assert fault.label == row.name and row.does
    assert row.rate_flag is None or row.rate_flag in FIELDS
    assert (row.outcome is not None) == (row.phase == STREAM)
    error = immediate_error(fault)
    assert (error is not None) == (row.status is not None) and (error is None or error.status == row.status)


def test_an_unknown_value_is_answered_with_every_value():
    with pytest.raises(InvalidRequest) as info:
        parse_fault_header("teapot")
    assert all(("slow:<ms>" if r.phase == DELAY else r.name) in str(info.value) for r in FAULTS)


def test_the_400_refuses_like_an_engine_over_its_context():
    error = immediate_error(parse_fault_header("400"))
    assert (error.status, error.code) == (400, "context_length_exceeded")
    assert next(r for r in FAULTS if r.name == "400").phase == IMMEDIATE


@pytest.mark.parametrize(
    ("rates", "kind"), [({"cut_rate": 1.0}, "cut"), ({"stream_error_rate": 1.0}, "stream_error")]
)
def test_rates_draw_their_stream_fault_only_for_streams(rates, kind):
    config = dataclasses.replace(SimConfig(), **rates)
    assert draw_fault(config, True, 8, random.Random(1)).kind == kind
    assert draw_fault(config, False, 8, random.Random(1)).kind is None
