"""The run format (run.json + results.parquet): a golden run per version reads, a column added by a
minor version reads as nulls, a newer minor reads, another major is refused; ResultRow is the columns
written and RunInfo writes the golden run.json of its version."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from llmreplay.cli import cli
from llmreplay.errors import BadInput
from llmreplay.run_format import (
    ADDED_COLUMNS,
    METADATA_KEY,
    RESULT_SCHEMA,
    RESULTS_FILE,
    RUN_FILE,
    RUN_FORMAT_VERSION,
    ResultRow,
    RunCounts,
    RunInfo,
    RunMachine,
    RunTarget,
    RunTrace,
    result_table,
    run_info_from_json,
    stated_load,
    write_run_info,
)
from llmreplay.trace_arrow import trace_schema
from replayer.measured.side import load_side

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = sorted((ROOT / "samples" / "golden").glob("run-v*"))
# Recipes (each written once, never regenerated): `llmreplay replay samples/golden/trace-v1.1.parquet
# --target SIM --model sim-model --speed 20` against `llmreplay sim --profile fast --error-rate 0.2
# --seed 3`; hostname and run_dir rewritten. v1.0 by llmreplay before error_detail, v1.1 after;
# v1.2 replays trace-v1.2.parquet, the sim also given --reasoning-tokens 4; v1.3 the same, with its preflight
# (its recorded_model column added from trace-v1.2's model of each source_request_id); v1.4 the same run
# as v1.3 with `--warmup 10s` (its first 5 rows are the warm-up: side.table holds the 16 measured ones).
EXPECTED = {
    "run-v1.0": {"rows": 21, "failed": 9, "details": 0},
    "run-v1.1": {"rows": 21, "failed": 9, "details": 9},
    "run-v1.2": {"rows": 21, "failed": 9, "details": 9},
    "run-v1.3": {"rows": 21, "failed": 9, "details": 9},
    "run-v1.4": {"rows": 16, "failed": 8, "details": 8, "warmup": 5},
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
    assert side.warmup.num_rows == expected.get("warmup", 0)  # older runs: no warm-up, loop 0
    assert not any(side.table.column("warmup").to_pylist()) and set(
        side.table.column("loop").to_pylist()
    ) == {0}
    out = CliRunner().invoke(cli, ["report", str(path), "--json"], catch_exceptions=False)
    result = json.loads(out.output)
    assert out.exit_code == 1 and "error rate" in result["verdict"]["headline"]  # a fifth of them failed


def test_error_detail_came_with_1_1_and_the_reasoning_columns_with_1_2():
    reasoning = dict.fromkeys(("ttfo_ns", "reasoning_tokens", "reasoning_ns"), "1.2")
    phases = {"warmup": "1.4", "loop": "1.4", "host": "1.4", "shard": "1.4", "cache_write_tokens": "1.4"}
    assert ADDED_COLUMNS == {"error_detail": "1.1", **reasoning, "recorded_model": "1.3", **phases}


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


CURRENT = ROOT / "samples" / "golden" / f"run-v{RUN_FORMAT_VERSION}"
NESTED = {"target": RunTarget, "trace": RunTrace, "machine": RunMachine, "counts": RunCounts}


def _golden_info() -> RunInfo:
    data = json.loads((CURRENT / RUN_FILE).read_text())
    return RunInfo(**{key: NESTED[key](**value) if key in NESTED else value for key, value in data.items()})


def test_result_row_fields_are_the_columns_written():
    assert [f.name for f in dataclasses.fields(ResultRow)] == RESULT_SCHEMA.names
    assert pq.read_schema(CURRENT / RESULTS_FILE).equals(RESULT_SCHEMA)  # types and nullability too
    row = ResultRow(
        request_id="r1#c1",
        turn_index=0,
        arrival_time=1_700_000_000_000_000,
        endpoint="chat_completions",
        stream=True,
        tools_count=0,
        structured_output="none",
        source_request_id="r1",
        copy_index=1,
        worker=0,
        scheduled_offset_ns=5,
        session_wait_ns=0,
        error_kind="shed_by_client",
    )
    [back] = result_table([row]).to_pylist()
    assert (
        back["request_id"] == "r1#c1" and back["error_kind"] == "shed_by_client" and back["ttft_ns"] is None
    )
    with pytest.raises(TypeError, match="source_request_id"):  # a column that is never null must be given
        ResultRow(**{k: v for k, v in dataclasses.asdict(row).items() if k != "source_request_id"})


def test_columns_named_like_the_trace_have_its_types():
    trace_types = {f.name: f.type for f in trace_schema(False)}
    shared = [f for f in RESULT_SCHEMA if f.name in trace_types]
    assert len(shared) == 29 and all(f.type == trace_types[f.name] for f in shared)


def test_run_info_writes_the_golden_run_json_of_its_version(tmp_path):
    write_run_info(tmp_path, _golden_info())
    written = (tmp_path / RUN_FILE).read_bytes()
    assert written == (CURRENT / RUN_FILE).read_bytes().rstrip(b"\n"), (
        "run.json changed: a new key is a new minor RUN_FORMAT_VERSION with a golden run of its own "
        "(samples/golden/run-vX.Y, see samples/README.md)"
    )


def test_speed_and_scale_are_read_from_one_place():
    current = json.loads((CURRENT / RUN_FILE).read_text())
    assert stated_load(run_info_from_json(current, "golden")) == {"speed": 20.0, "scale": 1.0}
    elsewhere = {**current, "speed": 3.0, "config": {"speed": 3.0}}  # not where a run states them
    assert stated_load(run_info_from_json(elsewhere, "test")) == {}
    odd = {**current, "config": {"schedule": {"speed": True, "scale": -1, "seed": 0}}}
    assert stated_load(run_info_from_json(odd, "test")) == {}
    assert stated_load(None) == {}


def test_a_newer_minor_version_reads(tmp_path):
    run = tmp_path / "newer"
    shutil.copytree(CURRENT, run)
    data = json.loads((run / RUN_FILE).read_text())
    (run / RUN_FILE).write_text(json.dumps({**data, "run_format_version": "1.9", "added_in_1_9": {"x": 1}}))
    assert load_side(run, "candidate").table.num_rows == EXPECTED[CURRENT.name]["rows"]


def test_a_results_file_of_a_newer_major_is_refused_without_its_run_json(tmp_path):
    table = pq.read_table(CURRENT / RESULTS_FILE)
    table = table.replace_schema_metadata({METADATA_KEY: json.dumps({"run_format_version": "2.3"})})
    pq.write_table(table, tmp_path / RESULTS_FILE)
    with pytest.raises(BadInput, match="run format version 2.3 is not supported") as refused:
        load_side(tmp_path / RESULTS_FILE, "candidate")
    assert "\n" not in str(refused.value)


def test_a_column_of_the_version_a_run_states_must_be_there(tmp_path):
    run = tmp_path / "odd"
    shutil.copytree(CURRENT, run)  # 1.1 states error_detail: lacking it is not an older run
    pq.write_table(pq.read_table(run / RESULTS_FILE).drop_columns(["error_detail"]), run / RESULTS_FILE)
    with pytest.raises(BadInput, match="column 'error_detail' is missing"):
        load_side(run, "candidate")


def test_a_warmed_up_run_reports_its_measured_window_only():
    side = load_side(CURRENT, "run")
    summary = json.loads((CURRENT / RUN_FILE).read_text())["summary"]
    assert summary["requests"] == side.table.num_rows == 16 and side.warmup.num_rows == 5
    phases = json.loads((CURRENT / RUN_FILE).read_text())["phases"]
    assert phases["warmup_s"] == 10.0 and phases["loops_planned"] == phases["loops_completed"] == 1


def test_soak_loops_of_one_request_are_distinct_rows(tmp_path):
    run = tmp_path / "soak"
    shutil.copytree(CURRENT, run)
    table = pq.read_table(run / RESULTS_FILE)
    at = table.schema.get_field_index("loop")
    again = table.set_column(at, table.schema.field(at), pa.array([1] * table.num_rows, pa.int32()))
    pq.write_table(pa.concat_tables([table, again]), run / RESULTS_FILE)
    assert load_side(run, "run").table.num_rows == 32
    pq.write_table(pa.concat_tables([table, table]), run / RESULTS_FILE)
    with pytest.raises(BadInput, match="duplicate"):
        load_side(run, "run")


def test_every_golden_run_json_reads_as_one_typed_record():
    """run.json of every 1.x, typed in one place (llmreplay.run_format.run_info_from_json); a field missing
    or of the wrong type is one line."""
    import json
    from pathlib import Path

    import pytest

    from llmreplay.errors import BadInput
    from llmreplay.run_format import RunCounts, run_info_from_json

    golden = sorted((Path(__file__).resolve().parents[2] / "samples" / "golden").glob("run-v*/run.json"))
    assert len(golden) >= 5
    for path in golden:
        document = json.loads(path.read_text())
        info = run_info_from_json({**document, "added_by_a_later_minor": 1}, str(path))
        assert isinstance(info.counts, RunCounts) and info.counts.sent == document["counts"]["sent"]
        assert info.counts.to_send == document["counts"].get("to_send", info.counts.planned)
    with pytest.raises(BadInput, match="run.json lacks or misspells counts"):
        run_info_from_json({k: v for k, v in document.items() if k != "counts"}, "r")
    with pytest.raises(BadInput, match="must be integers"):
        run_info_from_json({**document, "started_unix_ns": "soon"}, "r")
