"""`llmreplay plan`: the split `replay --shard K/N` makes, shown before anything is sent."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from llmreplay.cli import cli

SAMPLE = Path(__file__).resolve().parents[3] / "samples" / "content_multiturn.parquet"


def test_the_plan_covers_every_planned_request_once_with_whole_sessions(tmp_path):
    out = tmp_path / "plan.json"
    result = CliRunner().invoke(
        cli, ["plan", str(SAMPLE), "--shards", "3", "--speed", "50", "-o", str(out), "--json"]
    )
    assert result.exit_code == 0, result.output
    plan = json.loads(result.output)
    assert json.loads(out.read_text()) == plan
    assert sum(plan["requests"]) == plan["planned"] == 212 and sum(plan["sessions"]) == 40
    assert len(plan["trace_fingerprint"]) == 64 and plan["host_ceiling_requests_per_s"] == 150


def test_the_text_plan_warns_of_a_shard_over_one_hosts_ceiling():
    result = CliRunner().invoke(cli, ["plan", str(SAMPLE), "--shards", "1", "--speed", "5000"])
    assert result.exit_code == 0 and "over one host's ceiling" in result.output


def test_a_bad_shard_count_is_one_line():
    result = CliRunner().invoke(cli, ["plan", str(SAMPLE), "--shards", "0"])
    assert result.exit_code == 2 and "--shards" in result.output
