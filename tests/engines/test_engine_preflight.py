"""The preflight's findings on each real engine: detected with its version, length forced with the row's
fields, cached tokens reported on a repeated prompt, the context stated; on vLLM tools accepted.

The trace is a few shape rows (prompt synthesis never runs: the preflight only reads their columns),
one of them longer than the engines' 8192-token context.
"""

from __future__ import annotations

import numpy as np
import pytest
from engine_client import MAX_MODEL_LEN, record_figure
from replay_helpers import content_record, write_content_trace

from llmreplay.engines import BY_NAME
from replayer.config import ReplayConfig
from replayer.plan.trace_rows import read_trace_rows
from replayer.preflight import OK, WARN, run_preflight, trace_needs
from replayer.target import probe_target

pytestmark = [pytest.mark.engines, pytest.mark.timeout(600)]

TOOLS = '[{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]'
ENGINE_ROWS = {"vllm": "vllm", "llama.cpp": "llamacpp"}


@pytest.fixture(scope="module")
def findings(engine, tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp(f"preflight-{engine.name}")
    records = [
        content_record(0, 0.0, model="tiny"),
        content_record(1, 1.0, model="tiny", tools_count=1, tool_choice="required", content_tools=TOOLS),
        content_record(2, 2.0, model="tiny", tools_count=1, tool_choice="auto", content_tools=TOOLS),
        content_record(3, 3.0, model="tiny", stream=False, prompt_tokens=MAX_MODEL_LEN + 100),
    ]
    trace = write_content_trace(tmp_path / "trace.parquet", records)
    rows = read_trace_rows(trace)
    config = ReplayConfig(trace_path=str(trace), target_url=engine.base_url, run_dir=str(tmp_path / "run"))
    target = probe_target(engine.base_url, "detect", None)
    found = run_preflight(config, target, trace_needs(rows.table, np.arange(len(rows)), None))
    record_figure(engine.name, "preflight", [line.strip() for line in found.lines()])
    return found, {check.name: check for check in found.checks}


def test_the_engine_and_its_version_are_found(engine, findings):
    found, _ = findings
    assert found.engine == ENGINE_ROWS[engine.name] and found.engine_from == "owned_by"
    assert found.version, f"{engine.name}: no version from {BY_NAME[found.engine].version}"
    if engine.name == "vllm":
        assert found.version == "0.32.0" and found.version_from == "/version"
    else:
        assert found.version_from == "/props"


def test_output_length_is_forced_with_the_rows_fields(engine, findings):
    _, checks = findings
    length = checks["length"]
    assert length.outcome == OK, length
    fields = {"vllm": "ignore_eos, min_tokens", "llama.cpp": "ignore_eos, n_predict"}[engine.name]
    assert fields in length.detail


def test_cached_tokens_are_reported_on_a_repeat(engine, findings):
    _, checks = findings
    assert checks["cached_tokens"].outcome == OK, checks["cached_tokens"]


def test_the_context_is_stated_and_the_overlong_request_counted(engine, findings):
    found, checks = findings
    assert found.context_tokens == MAX_MODEL_LEN
    context = checks["context"]
    assert context.outcome == WARN and f"1 of 4 requests need more than {MAX_MODEL_LEN:,}" in context.detail


def test_vllm_accepts_the_tools_the_trace_uses(engine, findings):
    if engine.name != "vllm":
        pytest.skip("llama.cpp's tool answers are not asserted: with random weights it emits no tool call")
    found, checks = findings
    assert checks["tools:required"].outcome == OK and checks["tools:auto"].outcome == OK, checks
    assert found.stop is None
