"""The engine table: every row complete and consistent; a row's facts are what the replayer uses."""

from __future__ import annotations

from dataclasses import astuple

import pytest

from llmreplay.engines import BY_NAME, DEFAULT, ENGINES, FLAG, FLOOR, LIMIT, SIM_OWNED_BY

WANTED = {"vllm", "sglang", "trtllm", "llamacpp", "ollama", "tgi", "openai"}


def test_one_row_per_engine_with_a_source():
    assert {e.name for e in ENGINES} == WANTED and len(ENGINES) == len(WANTED)
    assert all(e.source and e.title for e in ENGINES)
    assert DEFAULT.name == "openai" and not DEFAULT.forces_length


@pytest.mark.parametrize("engine", ENGINES, ids=lambda e: e.name)
def test_a_row_is_consistent(engine):
    assert all(kind in (FLAG, LIMIT, FLOOR) for _, kind in engine.force_length)
    assert all(m == m.lower() for m in engine.owned_by + engine.server_header)
    assert all(p.path.startswith("/") for p in engine.probes)
    names = [value for value in astuple(engine.metrics) if value]
    assert not names or engine.metrics_path, "metric names need the path they are served at"
    assert engine.cached_tokens_flag is None or engine.cached_tokens


def test_the_engines_that_cannot_force_length_say_so():
    assert {e.name for e in ENGINES if not e.forces_length} == {"ollama", "tgi", "openai"}
    assert dict(BY_NAME["llamacpp"].force_length) == {"ignore_eos": FLAG, "n_predict": LIMIT}
    assert dict(BY_NAME["vllm"].force_length) == {"ignore_eos": FLAG, "min_tokens": FLOOR}
    assert BY_NAME["trtllm"].rejects_unknown_fields


def test_the_sim_is_recognised_as_vllm_whose_names_it_serves():
    assert SIM_OWNED_BY in BY_NAME["vllm"].owned_by
    assert BY_NAME["vllm"].metrics.running == "vllm:num_requests_running"
