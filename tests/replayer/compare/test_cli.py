"""`llmreplay compare` / `report` end to end on real Parquet files: verdicts, exit codes, bad input."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from compare_fixtures import Shape, latencies_ns, write_run, write_trace_file

from llmreplay.cli import cli
from llmreplay.run_format import RESULT_SCHEMA, RESULTS_FILE

SHAPE = Shape(n=5000, seed=11, interval_ms=5.0)


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Baseline, an identical copy, a 1.5x-slower TTFT, and a small random perturbation of it."""
    root = tmp_path_factory.mktemp("runs")
    ttft, tpot = latencies_ns(SHAPE, seed=1)
    write_run(root / "baseline", SHAPE, ttft, tpot, speed=2.0)
    write_run(root / "identical", SHAPE, ttft, tpot, speed=2.0)
    write_run(root / "slower", SHAPE, (ttft * 1.5).astype(np.int64), tpot, speed=2.0)
    small = Shape(n=300, seed=11, interval_ms=5.0)
    b_ttft, b_tpot = latencies_ns(small, seed=1)
    c_ttft, c_tpot = latencies_ns(small, seed=2, ttft_ms=80.0 * 1.04)  # same law, redrawn, +4 %
    write_run(root / "small_baseline", small, b_ttft, b_tpot)
    write_run(root / "small_perturbed", small, c_ttft, c_tpot)
    write_trace_file(root / "trace.parquet", SHAPE, ttft, tpot)
    return root


def latency_verdicts(result: dict) -> dict[str, str]:
    return {
        f"{metric} {p}": row["verdict"]
        for metric, metric_rows in result["latency"].items()
        for p, row in metric_rows["comparison"].items()
    }


def test_identical_runs_are_no_change_on_every_cell_with_exit_0(runs):
    out = invoke("compare", str(runs / "baseline"), str(runs / "identical"), "--json")
    assert out.exit_code == 0, out.output
    result = json.loads(out.output)
    assert result["verdict"]["status"] == "pass"
    verdicts = latency_verdicts(result)
    ttfo = {verdicts.pop(f"ttfo p{q}") for q in (50, 90, 95, 99)}  # nothing reasoned: no TTFO data
    assert ttfo == {"no_data"} and set(verdicts.values()) == {"no_change"}  # all 16, not 3 of 16
    latency = result["latency"]
    cells = [
        row for name, metric in latency.items() if name != "ttfo" for row in metric["comparison"].values()
    ]
    assert {(c["ratio"], c["ci_low"], c["ci_high"]) for c in cells} == {(1.0, 1.0, 1.0)}
    assert result["paired"]["metrics"]["ttft"]["p50"] == 1.0
    assert not result["fidelity"]["unfaithful"]
    assert result["verdict"]["headline"] == "GO: no latency change beyond ±10%; replay faithful"


def test_slower_ttft_is_a_regression_with_exit_1(runs):
    out = invoke("compare", str(runs / "baseline"), str(runs / "slower"), "--json")
    assert out.exit_code == 1
    result = json.loads(out.output)
    verdicts = latency_verdicts(result)
    assert all(verdicts[f"ttft p{q}"] == "regression" for q in (50, 90, 95, 99))
    assert all(verdicts[f"itl p{q}"] == "no_change" for q in (50, 90, 95, 99))
    ttft_p50 = result["latency"]["ttft"]["comparison"]["p50"]
    assert ttft_p50["ratio"] == pytest.approx(1.5, rel=1e-3)
    assert ttft_p50["ci_low"] > 1.4 and ttft_p50["ci_high"] < 1.6
    paired = result["paired"]["metrics"]["ttft"]
    assert paired["p1"] == pytest.approx(1.5, rel=1e-3) and paired["share_slower"] == 1.0
    assert "ttft regressed at p50, p90, p95, p99 (≈1.50x)" in result["verdict"]["reasons"]
    assert result["verdict"]["headline"].startswith(
        "NO-GO: TTFT ≈1.50× (CI 1.50–1.50) slower at every percentile"
    )  # paired: every request is exactly 1.5x slower, so is every resample


def test_small_perturbation_is_inconclusive_not_regression(runs):
    out = invoke("compare", str(runs / "small_baseline"), str(runs / "small_perturbed"), "--json")
    assert out.exit_code == 0, out.output
    verdicts = latency_verdicts(json.loads(out.output))
    assert "regression" not in verdicts.values()
    assert "inconclusive" in verdicts.values()


def test_trace_baseline_against_replay_run(runs):
    # The runs replayed at 2x, the trace ran at 1x: compared only when asked (see test_compare_gate).
    out = invoke(
        "compare", str(runs / "trace.parquet"), str(runs / "identical"), "--json", "--allow-different-load"
    )
    assert out.exit_code == 0, out.output
    result = json.loads(out.output)
    assert result["sides"]["baseline"]["kind"] == "trace"
    assert result["sides"]["candidate"]["time_scale"] == 2.0
    assert "gateway" in result["clock_domains"]["baseline"] and "note" in result["clock_domains"]
    arrival = next(c for c in result["fidelity"]["checks"] if c["check"].startswith("arrival-offset"))
    assert arrival["status"] == "ok" and arrival["value"] < 1.0


def test_offset_ttft_subtracts_a_network_difference(runs):
    out = invoke("compare", str(runs / "baseline"), str(runs / "identical"), "--offset-ttft", "5ms", "--json")
    result = json.loads(out.output)
    b, c = result["latency"]["ttft"]["baseline"]["p50_ms"], result["latency"]["ttft"]["candidate"]["p50_ms"]
    assert b - c == pytest.approx(5.0, abs=1e-6)
    assert result["clock_domains"]["offset_ttft_ms"] == 5.0


def test_slo_breach_exits_1_and_goodput_is_reported(runs):
    out = invoke(
        "compare",
        str(runs / "baseline"),
        str(runs / "identical"),
        "--slo",
        "ttft_p95<=1ms",
        "--slo",
        "e2e_p99<=60s",
        "--json",
    )
    assert out.exit_code == 1
    result = json.loads(out.output)
    assert [s["verdict"] for s in result["slos"]] == ["breach", "pass"]
    # Only non-streamed requests meet it: they have no TTFT, and a metric a request lacks does not count.
    assert result["goodput"]["candidate"]["good_requests"] == int((~SHAPE.arrays()["stream"]).sum())
    assert result["verdict"]["reasons"] == ["SLO ttft_p95<=1ms: breach"]
    assert result["verdict"]["headline"].startswith(
        "NO-GO: no latency change beyond ±10%; SLO ttft_p95<=1ms breached ("
    )


def test_terminal_puts_the_one_line_verdict_first(runs):
    out = invoke("compare", str(runs / "baseline"), str(runs / "slower"), "--slo", "ttft_p95<=10s")
    assert out.exit_code == 1
    first = out.output.splitlines()[0]
    assert first.startswith("NO-GO: TTFT ≈1.50× (CI 1.50–1.50) slower at every percentile")
    assert first.endswith("; SLOs still met; replay faithful")
    assert "regressed" not in out.output  # one headline, not a bullet per cell
    assert out.output.index("NO-GO") < out.output.index("Latency, baseline -> candidate")


def test_report_of_one_run(runs, tmp_path):
    html = tmp_path / "one.html"
    out = invoke("report", str(runs / "baseline"), "--slo", "ttft_p95<=10s", "--html", str(html))
    assert out.exit_code == 0, out.output
    assert out.output.splitlines()[0] == "PASS: SLOs met; error rate 0.0% ≤ 1%; replay faithful"
    assert "Latency (ms)" in out.output and html.stat().st_size > 10_000


def test_html_is_written_atomically_and_self_contained(runs, tmp_path):
    html = tmp_path / "sub" / "report.html"
    out = invoke(
        "compare",
        str(runs / "trace.parquet"),
        str(runs / "slower"),
        "--html",
        str(html),
        "--allow-different-load",
    )
    assert out.exit_code == 1
    text = html.read_text()
    headline = "<b>NO-GO</b>: TTFT ≈1.50× (CI 1.50–1.50) slower at every percentile"
    assert text.index(headline) < text.index("<h1>")  # the verdict first, then the detail
    assert [p.name for p in html.parent.iterdir()] == ["report.html"]
    assert "<script" not in text and "http://" not in text.replace("http://127.0.0.1:1/synthetic", "")
    assert "https://" not in text
    for heading in (
        "Verdict",
        "Fidelity of the replay",
        "Latency distributions",
        "Paired view",
        "Per bucket",
    ):
        assert f"<h2>{heading}</h2>" in text
    assert text.count("<svg") >= 10


# --- bad input: exit 2, one line naming what and where -----------------------------------------------


def assert_bad_input(out, fragment: str):
    assert out.exit_code == 2, out.output
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("llmreplay: error:") and fragment in lines[0], out.stderr


def test_missing_run(runs, tmp_path):
    out = invoke("compare", str(runs / "baseline"), str(tmp_path / "nope"))
    assert_bad_input(out, "candidate")
    assert "no such file or directory" in out.stderr


def test_mismatched_ids(runs, tmp_path):
    other = Shape(n=50, seed=99)
    table = pq.read_table(write_run(tmp_path / "other", other, *latencies_ns(other, seed=3)) / RESULTS_FILE)
    renamed = table.set_column(
        table.schema.get_field_index("source_request_id"),
        "source_request_id",
        [[f"elsewhere-{i}" for i in range(table.num_rows)]],
    )
    pq.write_table(renamed, tmp_path / "other" / RESULTS_FILE)
    out = invoke("compare", str(runs / "baseline"), str(tmp_path / "other"))
    assert_bad_input(out, "no request id in common")


def test_empty_run(runs, tmp_path):
    (tmp_path / "empty").mkdir()
    pq.write_table(RESULT_SCHEMA.empty_table(), tmp_path / "empty" / RESULTS_FILE)
    out = invoke("compare", str(runs / "baseline"), str(tmp_path / "empty"))
    assert_bad_input(out, "empty run")


def test_results_file_that_is_not_ours(runs, tmp_path):
    (tmp_path / "odd").mkdir()
    pq.write_table(
        pq.read_table(runs / "baseline" / RESULTS_FILE).drop_columns(["ttft_ns"]),
        tmp_path / "odd" / RESULTS_FILE,
    )
    out = invoke("compare", str(tmp_path / "odd"), str(runs / "baseline"))
    assert_bad_input(out, "column 'ttft_ns' is missing")


@pytest.mark.parametrize(
    ("flags", "fragment"),
    [
        (["--slo", "ttft_p95<500ms"], "--slo"),
        (["--slo", "ttft_p95<=500"], "not a duration"),
        (["--tolerance", "abc"], "--tolerance"),
        (["--tolerance", "150%"], "--tolerance"),
        (["--offset-ttft", "3"], "--offset-ttft"),
        (["--offset-ttft", "1h"], "would make latencies negative"),
        (["--max-error-rate", "abc"], "--max-error-rate"),
        (["--max-error-rate", "150%"], "--max-error-rate"),
        (["--max-dispatch-lag", "5"], "--max-dispatch-lag"),  # a unit is required: 5 what?
        (["--error-rate-tolerance", "x"], "--error-rate-tolerance"),
        (["--max-cached-share-difference", "150%"], "must be between 0% and 100%"),
    ],
)
def test_bad_flags(runs, flags, fragment):
    out = invoke("compare", str(runs / "baseline"), str(runs / "identical"), *flags)
    assert_bad_input(out, fragment)


def test_bad_run_json(runs, tmp_path):
    import shutil

    shutil.copytree(runs / "baseline", tmp_path / "broken")
    (tmp_path / "broken" / "run.json").write_text("{not json")
    out = invoke("report", str(tmp_path / "broken"))
    assert_bad_input(out, "run.json: not valid JSON")


def test_a_cache_that_misses_what_production_hit_is_unfaithful_in_report_and_compare(tmp_path):
    """Production (the trace) read 0% of its prompt tokens from the cache; a run that read half of them
    fails `report` (against the trace its run.json names) and `compare` (against the trace or a run)."""
    import pyarrow.compute as pc
    from compare_fixtures import copy_run_with

    small = Shape(n=300, seed=11, interval_ms=5.0)
    ttft, tpot = latencies_ns(small, seed=1)
    trace = write_trace_file(tmp_path / "trace.parquet", small, ttft, tpot)
    faithful = write_run(tmp_path / "faithful", small, ttft, tpot, config={"trace": {"path": str(trace)}})
    half = copy_run_with(
        faithful, tmp_path / "half", "cached_tokens", lambda t: pc.divide(t.column("prompt_tokens"), 2)
    )
    assert invoke("report", str(faithful)).exit_code == 0
    assert invoke("compare", str(faithful), str(faithful)).output.startswith("GO: ")
    reported = invoke("report", str(half), "--json")
    assert reported.exit_code == 1
    assert "cached-token share 50.0% vs production's 0.0%: 50.0 points apart > 2" in reported.output
    assert invoke("report", str(half), "--max-cached-share-difference", "60%").exit_code == 0
    assert invoke("report", str(half), "--max-cached-share-difference", "100%").exit_code == 0  # off
    for baseline in (trace, faithful):
        out = invoke("compare", str(baseline), str(half), "--json")
        assert out.exit_code == 1, out.output
        result = json.loads(out.output)
        assert result["fidelity"]["unfaithful"]
        assert result["cache"]["difference"] == pytest.approx(0.5, abs=1e-3)
        assert result["paired"]["cached_tokens"]["share_differ"] > 0.9
    text = invoke("compare", str(faithful), str(half)).output
    assert (
        "Prefix cache: cached-token share baseline 0.0% -> candidate 50.0% (+50.0 points; limit ±2)" in text
    )
