"""`compare`/`report` --junit, --csv and --json, and `export csv`, through the CLI: on synthetic runs
in-process, and end to end on replays against a fast and a slow `llmreplay sim`."""

from __future__ import annotations

import csv
import json
import os

import numpy as np
import pyarrow.csv as pacsv
import pytest
from click.testing import CliRunner
from compare_fixtures import Shape, latencies_ns, write_run, write_trace_file
from junitparser import Failure, JUnitXml, Skipped

from llmreplay.cli import cli
from llmreplay.compare_format import FORMAT, FORMAT_VERSION, gate_cases

SHAPE = Shape(n=300, seed=11, interval_ms=5.0)


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("ci-runs")
    ttft, tpot = latencies_ns(SHAPE, seed=1)
    write_run(root / "baseline", SHAPE, ttft, tpot)
    write_run(
        root / "slower",
        SHAPE,
        (ttft * 1.5).astype(np.int64),
        tpot,
        errors={3: "http_5xx"},
        error_details={3: "=cmd|' /C calc'!A0 500 boom"},  # a formula a spreadsheet would run
    )
    return root


def _junit_cases(path):
    return {case.name: case for suite in JUnitXml.fromfile(str(path)) for case in suite}


def test_compare_writes_junit_csv_and_versioned_json_that_agree(runs, tmp_path):
    junit, gate = tmp_path / "junit.xml", tmp_path / "gate.csv"
    out = invoke(
        "compare", str(runs / "baseline"), str(runs / "slower"), "--slo", "ttft_p95<=100ms",
        "--json", "--junit", str(junit), "--csv", str(gate),
    )  # fmt: skip
    assert out.exit_code == 1
    result = json.loads(out.output)
    assert (result["format"], result["format_version"]) == (FORMAT, FORMAT_VERSION)
    assert list(result)[:3] == ["format", "format_version", "mode"]
    cases = _junit_cases(junit)
    assert len(cases) == len(gate_cases(result))
    failures = {name for name, case in cases.items() if any(isinstance(r, Failure) for r in case.result)}
    assert failures == {"ttft p50", "ttft p90", "ttft p95", "e2e p50", "e2e p90", "ttft_p95<=100ms"}
    [failure] = cases["ttft_p95<=100ms"].result
    assert failure.message.startswith("SLO ttft_p95<=100ms breached: ")
    [few] = cases["ttft p99"].result  # fewer than 1,000 requests: p99 is shown, not judged
    assert isinstance(few, Skipped) and "too few values beyond the percentile" in few.message
    assert all(isinstance(r, Skipped) for name in ("ttfo p50", "e2e p99") for r in cases[name].result)
    rows = list(csv.DictReader(gate.open()))
    assert {r["name"] for r in rows if r["outcome"] == "failed"} == failures


def test_a_passing_gate_has_no_failed_case(runs, tmp_path):
    out = invoke("compare", str(runs / "baseline"), str(runs / "baseline"), "--junit", str(tmp_path / "j.xml"))
    assert out.exit_code == 0
    assert "JUnit XML: " in out.output
    xml = JUnitXml.fromfile(str(tmp_path / "j.xml"))
    assert sum(s.failures for s in xml) == 0 and sum(s.tests for s in xml) > 30


def test_report_writes_junit_without_latency_cells(runs, tmp_path):
    out = invoke("report", str(runs / "slower"), "--junit", str(tmp_path / "j.xml"), "--csv", str(tmp_path / "g.csv"))
    assert out.exit_code == 0, out.output
    suites = {s.name for s in JUnitXml.fromfile(str(tmp_path / "j.xml"))}
    assert suites == {"llmreplay report: fidelity", "llmreplay report: errors", "llmreplay report: sides"}


def test_export_csv_of_a_run_is_flat_in_ms_and_formula_safe(runs, tmp_path):
    out = invoke("export", "csv", str(runs / "slower"), "-o", str(tmp_path / "requests.csv"))
    assert out.exit_code == 0, out.output
    assert "wrote 300 requests" in out.output
    table = pacsv.read_csv(tmp_path / "requests.csv")
    names = table.column_names
    assert not [n for n in names if n.endswith("_ns")]
    assert {"ttft_ms", "e2e_ms", "tpot_ms", "itl_max_ms", "chunk_count", "dispatch_lag_ms"} <= set(names)
    rows = table.to_pylist()
    ttft, _ = latencies_ns(SHAPE, seed=1)
    assert rows[0]["ttft_ms"] == pytest.approx(int(ttft[0] * 1.5) / 1e6)
    assert rows[0]["dispatch_lag_ms"] == pytest.approx(0.2)
    assert rows[0]["arrival_time"].tzinfo is not None  # ISO 8601 in UTC: read back as a timestamp
    assert rows[3]["error_detail"].startswith("'=cmd")  # text, not a formula
    streamed = next(r for r in rows if r["stream"] and r["completion_tokens"] > 2)
    assert streamed["chunk_count"] == streamed["completion_tokens"]
    assert streamed["tpot_ms"] == pytest.approx(
        (streamed["e2e_ms"] - streamed["ttft_ms"]) / (streamed["completion_tokens"] - 1), rel=1e-6
    )


def test_export_csv_of_a_compare_result_and_a_newer_major_refused(runs, tmp_path):
    out = invoke("compare", str(runs / "baseline"), str(runs / "slower"), "--json")
    (tmp_path / "compare.json").write_text(out.output)
    done = invoke("export", "csv", str(tmp_path / "compare.json"), "-o", str(tmp_path / "gate.csv"))
    assert done.exit_code == 0, done.output
    rows = list(csv.DictReader((tmp_path / "gate.csv").open()))
    assert len(rows) == len(gate_cases(json.loads(out.output)))
    (tmp_path / "v2.json").write_text(out.output.replace(f'"format_version": "{FORMAT_VERSION}"', '"format_version": "2.0"'))
    refused = invoke("export", "csv", str(tmp_path / "v2.json"), "-o", str(tmp_path / "v2.csv"))
    assert refused.exit_code == 2
    assert "llmreplay.compare version 2.0 is not supported" in refused.output
    assert not (tmp_path / "v2.csv").exists()


@pytest.mark.parametrize("flag", ["--junit", "--csv", "--html"])
def test_bad_output_paths_are_one_line_before_any_work(runs, tmp_path, flag):
    link = tmp_path / "link.xml"
    link.symlink_to(tmp_path / "elsewhere.xml")
    (tmp_path / "f").write_text("a file")
    cases = (
        (link, "is a symbolic link"),
        (tmp_path, "is a directory"),
        (tmp_path / "f" / "x", f"{tmp_path / 'f'} is a file, not a directory"),
    )
    for target, expected in cases:
        out = invoke("compare", str(runs / "baseline"), str(tmp_path / "missing-run"), flag, str(target))
        assert out.exit_code == 2
        assert f"{flag} {target}: {expected}" in out.output  # the output is checked before the inputs
        assert len(out.output.strip().splitlines()) == 1
    assert not (tmp_path / "elsewhere.xml").exists()


def test_unwritable_directory_is_one_line(runs, tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    where = "/sys" if os.geteuid() == 0 else locked  # root writes anywhere but in /sys
    for args in (("export", "csv", str(runs / "baseline"), "-o"), ("report", str(runs / "baseline"), "--junit")):
        out = invoke(*args, f"{where}/r.csv")
        assert out.exit_code == 2 and "cannot write" in out.output
        assert len(out.output.strip().splitlines()) == 1


def test_export_csv_refuses_mooncake_flags_and_non_runs(runs, tmp_path):
    out = invoke("export", "csv", str(runs / "baseline"), "-o", str(tmp_path / "r.csv"), "--block-size", "1024")
    assert out.exit_code == 2 and "--block-size: applies to 'export mooncake' only" in out.output
    trace = write_trace_file(tmp_path / "trace.parquet", SHAPE, *latencies_ns(SHAPE, seed=1))
    out = invoke("export", "csv", str(trace), "-o", str(tmp_path / "t.csv"))
    assert out.exit_code == 2 and "not a replay run" in out.output


@pytest.mark.e2e
@pytest.mark.timeout(150)
def test_gate_in_ci_against_sims(processes, tmp_path):
    """The commands of docs/howto-gate-ci.md#gate-in-ci on replays against a fast and a slow sim."""
    from tests.e2e.compare.test_regression import SHAPE as E2E_SHAPE
    from tests.e2e.compare.test_regression import replay, run_cli, start_sims_together

    trace = write_trace_file(tmp_path / "trace.parquet", E2E_SHAPE, *latencies_ns(E2E_SHAPE, seed=1))
    fast, slow = start_sims_together(processes, ("fast", "slow"))
    replay(trace, fast, tmp_path / "baseline")
    replay(trace, slow, tmp_path / "candidate")
    junit, gate = tmp_path / "junit.xml", tmp_path / "gate.csv"
    done = run_cli(
        "compare", str(tmp_path / "baseline"), str(tmp_path / "candidate"), "--max-dispatch-lag", "1s",
        "--slo", "e2e_p99<=60s", "--json", "--junit", str(junit), "--csv", str(gate),
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    result = json.loads(done.stdout)
    assert result["format"] == FORMAT
    cases = _junit_cases(junit)
    [failure] = [r for r in cases["ttft p50"].result if isinstance(r, Failure)]
    assert failure.message.startswith("ttft p50 regressed: ")
    assert cases["e2e_p99<=60s"].is_passed
    exported = run_cli("export", "csv", str(tmp_path / "candidate"), "-o", str(tmp_path / "requests.csv"))
    assert exported.returncode == 0, exported.stderr
    table = pacsv.read_csv(tmp_path / "requests.csv")
    assert table.num_rows == E2E_SHAPE.n and table.column("ttft_ms").null_count < E2E_SHAPE.n
