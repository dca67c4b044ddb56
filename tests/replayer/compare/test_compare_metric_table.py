"""The metric table drives compare: a row that does not gate is shown with its CI but never fails the gate."""

from __future__ import annotations

import json

import pyarrow.compute as pc
from click.testing import CliRunner
from compare_fixtures import Shape, copy_run_with, latencies_ns, write_run

from llmreplay.cli import cli
from llmreplay.metrics import BY_NAME, GATING, LATENCY_METRICS

SHAPE = Shape(n=400, seed=5, interval_ms=10.0)


def test_a_tripled_ttfb_is_reported_as_a_regression_but_the_gate_holds(tmp_path):
    ttft, tpot = latencies_ns(SHAPE, seed=1)
    baseline = write_run(tmp_path / "baseline", SHAPE, ttft, tpot)
    candidate = copy_run_with(
        baseline, tmp_path / "slow_headers", "ttfb_ns", lambda t: pc.multiply(t.column("ttfb_ns"), 3)
    )
    out = CliRunner().invoke(
        cli, ["compare", str(baseline), str(candidate), "--json"], catch_exceptions=False
    )
    result = json.loads(out.output)
    assert out.exit_code == 0, result["verdict"]
    assert result["latency"]["ttfb"]["comparison"]["p50"]["verdict"] == "regression"
    assert result["latency"]["ttfb"]["comparison"]["p50"]["ratio"] == 3.0
    assert {row["item"] for row in result["verdict"]["rows"] if row["kind"] == "latency"} <= {
        f"{m.name} p{q}" for m in GATING for q in m.percentiles
    }
    assert set(result["metric_definitions"]) == set(LATENCY_METRICS) and not BY_NAME["ttfb"].gates
