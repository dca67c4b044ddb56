"""The run format (run.json + results.parquet): a golden run per version reads, a column added by a
minor version reads as nulls, an unknown major version is refused."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from llmreplay.cli import cli
from llmreplay.errors import BadInput
from llmreplay.run_format import ADDED_COLUMNS, RESULT_SCHEMA, RESULTS_FILE, RUN_FILE, RUN_FORMAT_VERSION
from replayer.compare.inputs import load_side

ROOT = Path(__file__).resolve().parents[3]
GOLDEN = sorted((ROOT / "samples" / "golden").glob("run-v*"))
# Recipes (each written once, never regenerated): `llmreplay replay samples/golden/trace-v1.1.parquet
# --target SIM --model sim-model --speed 20` against `llmreplay sim --profile fast --error-rate 0.2
# --seed 3`; hostname and run_dir rewritten. v1.0 by llmreplay before error_detail, v1.1 after.
EXPECTED = {
    "run-v1.0": {"rows": 21, "failed": 9, "details": 0},
    "run-v1.1": {"rows": 21, "failed": 9, "details": 9},
}


def test_there_is_a_golden_run_for_the_current_version():
    assert [p.name for p in GOLDEN] == list(EXPECTED)
    assert f"run-v{RUN_FORMAT_VERSION}" in EXPECTED


@pytest.mark.parametrize("path", GOLDEN, ids=[p.name for p in GOLDEN])
def test_golden_run_reads(path):
    side = load_side(path, "run")
    assert side.config["run_format_version"] == path.name.removeprefix("run-v")
    assert side.table.schema == RESULT_SCHEMA
    expected = EXPECTED[path.name]
    kinds = side.table.column("error_kind").to_pylist()
    details = side.table.column("error_detail").to_pylist()
    assert side.table.num_rows == expected["rows"] and sum(k is not None for k in kinds) == expected["failed"]
    assert sum(d is not None for d in details) == expected["details"]  # 1.0 reads error_detail as nulls
    assert all((d is None) or ("simulated engine failure" in d) for d in details)
    out = CliRunner().invoke(cli, ["report", str(path), "--json"], catch_exceptions=False)
    result = json.loads(out.output)
    assert out.exit_code == 1 and "error rate" in result["verdict"]["headline"]  # a fifth of them failed


def test_error_detail_came_with_1_1():
    assert ADDED_COLUMNS == {"error_detail": "1.1"}


def test_unknown_major_version_is_refused(tmp_path):
    run = tmp_path / "future"
    shutil.copytree(GOLDEN[-1], run)
    data = json.loads((run / RUN_FILE).read_text())
    (run / RUN_FILE).write_text(json.dumps({**data, "run_format_version": "2.0"}))
    with pytest.raises(BadInput, match="run format version 2.0 is not supported"):
        load_side(run, "candidate")


def test_a_missing_column_that_no_minor_version_added_is_bad_input(tmp_path):
    run = tmp_path / "odd"
    shutil.copytree(GOLDEN[-1], run)
    table = pq.read_table(run / RESULTS_FILE).drop_columns(["dispatch_lag_ns"])
    pq.write_table(table, run / RESULTS_FILE)
    with pytest.raises(BadInput, match="column 'dispatch_lag_ns' is missing"):
        load_side(run, "candidate")
