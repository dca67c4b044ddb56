"""The reasoning share per side, and the finding when the split between reasoning and answer moved."""

from __future__ import annotations

import json

import pyarrow.compute as pc
from click.testing import CliRunner
from compare_fixtures import Shape, copy_run_with, latencies_ns, write_run

from llmreplay.cli import cli
from replayer.judge.verdict import share_moved

SHAPE = Shape(n=200, seed=4, interval_ms=10.0)


def test_a_share_that_moved_by_five_points_or_more_is_a_finding():
    assert share_moved({"b": {"reasoning_share": 0.2}, "c": {"reasoning_share": 0.4}}) == (
        "reasoning share of output 20% -> 40%"
    )
    assert share_moved({"b": {"reasoning_share": 0.2}, "c": {"reasoning_share": 0.24}}) is None
    assert share_moved({"b": {"reasoning_share": None}, "c": {"reasoning_share": 0.4}}) is None  # a 1.1 trace


def test_compare_reports_the_moved_split_without_failing_on_it(tmp_path):
    ttft, tpot = latencies_ns(SHAPE, seed=2)
    baseline = write_run(tmp_path / "baseline", SHAPE, ttft, tpot)
    candidate = copy_run_with(baseline, tmp_path / "thinks", "reasoning_tokens", _half_the_output)
    out = CliRunner().invoke(
        cli, ["compare", str(baseline), str(candidate), "--json"], catch_exceptions=False
    )
    result = json.loads(out.output)
    assert out.exit_code == 0, result["verdict"]
    assert result["sides"]["baseline"]["reasoning_share"] == 0.0
    assert 0.45 < result["sides"]["candidate"]["reasoning_share"] <= 0.5
    assert "reasoning share of output 0% -> 49%" in result["verdict"]["headline"]  # odd lengths round down
    assert {"item": "reasoning share", "kind": "output", "verdict": "moved"}.items() <= next(
        row for row in result["verdict"]["rows"] if row["item"] == "reasoning share"
    ).items()


def _half_the_output(table):
    """The same output tokens, half of them reasoning."""
    return pc.divide(table.column("completion_tokens"), 2)
