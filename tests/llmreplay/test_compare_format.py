"""The compare result format (llmreplay.compare_format): the golden result of every version reads, another
major is refused in one line, and the gate's cases (JUnit, CSV) fail exactly when the verdict does."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from junitparser import Failure, JUnitXml, Skipped

from llmreplay.compare_format import (
    CASE_COLUMNS,
    FAILED,
    FORMAT,
    FORMAT_VERSION,
    PASSED,
    SKIPPED,
    check_version,
    dumps,
    gate_cases,
    read_compare_result,
    stamped,
)
from llmreplay.compare_outputs import junit_xml, safe_cell, verdict_csv, write_junit
from llmreplay.errors import BadInput

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = sorted((ROOT / "samples" / "golden").glob("compare-v*.json"))
# Recipe (each written once, never regenerated), from the repository's root:
#   llmreplay compare samples/golden/run-v1.4 samples/golden/run-v1.4 --slo 'ttft_p95<=50ms' \
#       --slo 'e2e_p99<=20s' --json > samples/golden/compare-v1.0.json      (NO-GO: error rate 50% > 1%)
#   the same command > samples/golden/compare-v1.1.json (1.1 adds `dependence`)
CURRENT = ROOT / "samples" / "golden" / f"compare-v{FORMAT_VERSION}.json"


def test_there_is_a_golden_result_for_the_current_version():
    assert CURRENT in GOLDEN


@pytest.mark.parametrize("path", GOLDEN, ids=lambda p: p.name)
def test_golden_result_reads_and_its_cases_agree_with_its_verdict(path):
    result = read_compare_result(path)
    assert list(result)[:2] == ["format", "format_version"] and result["format"] == FORMAT
    cases = gate_cases(result)
    assert {c.kind for c in cases} >= {"fidelity", "latency", "slo", "errors", "sides"}
    failed = [c for c in cases if c.outcome == FAILED]
    assert bool(failed) == (result["verdict"]["exit_code"] == 1)
    assert len([c for c in cases if c.kind == "latency"]) == 20  # 5 gating metrics x 4 percentiles


def test_the_golden_result_has_the_keys_compare_writes_today(tmp_path):
    """A key added to the result is a minor version (a new golden file); one removed or renamed, a major."""
    from replayer.compare.config import CompareConfig
    from replayer.compare.sides import compare_sides
    from replayer.judge.slo import parse_slo
    from replayer.measured.side import load_side

    run = ROOT / "samples" / "golden" / "run-v1.4"
    config = CompareConfig(slos=(parse_slo("ttft_p95<=50ms"), parse_slo("e2e_p99<=20s")))
    today = json.loads(dumps(compare_sides(load_side(run, "baseline"), load_side(run, "candidate"), config)))
    golden = json.loads(CURRENT.read_text())
    assert list(today) == list(golden)
    assert list(today["verdict"]) == list(golden["verdict"])
    assert today["verdict"]["headline"] == golden["verdict"]["headline"]


def test_stamped_puts_the_name_and_version_first_and_keeps_every_key():
    result = {"mode": "compare", "verdict": {"exit_code": 0}, "format": "old"}
    out = stamped(result)
    assert list(out) == ["format", "format_version", "mode", "verdict"]
    assert out["format"] == FORMAT and out["format_version"] == FORMAT_VERSION
    assert json.loads(dumps({"x": float("nan"), "verdict": {}}))["x"] is None  # JSON has no NaN


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        ({"format": FORMAT, "format_version": "2.0", "verdict": {}}, "version 2.0 is not supported"),
        ({"format": FORMAT, "format_version": "one", "verdict": {}}, "'one' is not a version"),
        ({"format": "llmreplay.capacity", "format_version": "1.0"}, "not a llmreplay.compare result"),
        ({"mode": "compare"}, "(no format name)"),
        ([1, 2], "(no format name)"),
        ({"format": FORMAT, "format_version": "1.0"}, "without a verdict"),
    ],
)
def test_check_version_refuses_in_one_line(document, expected):
    with pytest.raises(BadInput, match="^[^\n]*$") as info:
        check_version(document, "x.json")
    assert expected in str(info.value)


def test_a_later_minor_reads(tmp_path):
    path = tmp_path / "later.json"
    document = json.loads(CURRENT.read_text())
    document["format_version"] = "1.9"
    document["added_by_1_9"] = {"anything": True}
    path.write_text(json.dumps(document))
    assert read_compare_result(path)["added_by_1_9"] == {"anything": True}


def test_unreadable_files_are_one_line(tmp_path):
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(BadInput, match="not JSON"):
        read_compare_result(tmp_path / "bad.json")
    with pytest.raises(BadInput, match="cannot read"):
        read_compare_result(tmp_path / "missing.json")


# -- the gate's cases on hand-made results ------------------------------------------------------------


def _result(cell_verdicts: dict[str, str], strict: bool = False, slo_verdict: str = "pass") -> dict:
    """A compare result with the given latency verdicts (item -> verdict) and one SLO."""
    latency, rows = {}, []
    for item, verdict in cell_verdicts.items():
        metric, p = item.split()
        table = latency.setdefault(metric, {"baseline": {}, "candidate": {}, "comparison": {}})
        table["baseline"][f"{p}_ms"], table["candidate"][f"{p}_ms"] = 10.0, 15.0
        table["comparison"][p] = {"ratio": 1.5, "ci_low": 1.4, "ci_high": 1.6, "verdict": verdict}
        rows.append({"item": item, "kind": "latency", "verdict": verdict, "detail": ""})
    latency["ttfb"] = {"comparison": {"p50": {"ratio": 9.0, "verdict": "regression"}}}  # does not gate
    failed = "regression" in cell_verdicts.values() or slo_verdict != "pass"
    failed |= strict and "inconclusive" in cell_verdicts.values()
    return {
        "mode": "compare",
        "tolerance": 0.1,
        "fail_on_inconclusive": strict,
        "fidelity": {
            "checks": [
                {"check": "candidate: dispatch lag p99 (ms)", "status": "fail", "value": 9.0, "limit": 5.0,
                 "detail": "p50 1 ms, p99 9 ms", "summary": "dispatch lag p99 9.00 ms > 5 ms", "side": "candidate"},
                {"check": "streamed share (difference)", "status": "warn", "value": 0.0, "limit": 0.02,
                 "detail": "baseline 80%, candidate 80%", "summary": "streamed share"},
            ]
        },  # fmt: skip
        "latency": latency,
        "slos": [
            {"slo": "ttft_p95<=500ms", "metric": "ttft", "percentile": 95.0, "threshold_ms": 500.0,
             "candidate_ms": 612.5, "baseline_ms": 400.0, "verdict": slo_verdict},
        ],  # fmt: skip
        "errors": {
            "gate": {"check": "candidate: error rate", "status": "ok", "value": 0.0, "limit": 0.01,
                     "detail": "0 of 10 requests failed", "summary": "error rate 0.0% > 1%"},
            "comparison": {"difference": 0.02, "ci_low": -0.01, "ci_high": 0.05, "verdict": "inconclusive"},
        },  # fmt: skip
        "sides": {"baseline": {"successful": 10, "requests": 10}, "candidate": {"successful": 0, "requests": 10}},
        "verdict": {"exit_code": 1 if failed else 0, "headline": "NO-GO: x < y & z", "rows": rows},
    }


def test_each_case_fails_or_skips_with_its_reason():
    cases = {c.name: c for c in gate_cases(_result({"ttft p50": "regression", "e2e p99": "inconclusive"}))}
    lag = cases["candidate: dispatch lag p99 (ms)"]
    assert lag.outcome == FAILED and lag.message.startswith("candidate: dispatch lag p99 9.00 ms > 5 ms")
    assert cases["streamed share (difference)"].outcome == PASSED  # a warning does not fail the gate
    ttft = cases["ttft p50"]
    assert ttft.outcome == FAILED and (ttft.baseline_ms, ttft.candidate_ms, ttft.ratio) == (10.0, 15.0, 1.5)
    assert ttft.message == "ttft p50 regressed: 10.0 -> 15.0 ms, 1.50x (CI 1.40-1.60); over the ±10% tolerance, CI above 1"
    assert cases["e2e p99"].outcome == SKIPPED and "inconclusive" in cases["e2e p99"].message
    assert "ttfb p50" not in cases  # shown, never judged
    assert cases["ttft_p95<=500ms"].outcome == PASSED
    assert cases["error rate change"].outcome == SKIPPED
    assert cases["candidate: successful requests"].outcome == FAILED
    assert cases["baseline: successful requests"].outcome == PASSED


def test_fail_on_inconclusive_turns_skipped_cases_into_failures():
    cases = {c.name: c for c in gate_cases(_result({"e2e p99": "inconclusive"}, strict=True))}
    assert cases["e2e p99"].outcome == FAILED and "--fail-on-inconclusive" in cases["e2e p99"].message
    assert cases["error rate change"].outcome == FAILED


def test_an_slo_breach_carries_value_and_limit():
    case = {c.name: c for c in gate_cases(_result({}, slo_verdict="breach"))}["ttft_p95<=500ms"]
    assert case.outcome == FAILED and case.message == "SLO ttft_p95<=500ms breached: 612.5 ms vs limit 500 ms"


def test_junit_reads_back_with_a_junit_parser(tmp_path):
    result = _result({"ttft p50": "regression", "ttft p90": "no_change", "e2e p99": "inconclusive"})
    result["fidelity"]["checks"][0]["detail"] = "bad \x01 byte <&>"  # control characters are not XML
    path = write_junit(tmp_path / "junit.xml", result)
    xml = JUnitXml.fromfile(str(path))
    cases = {case.name: case for suite in xml for case in suite}
    expected = gate_cases(result)
    assert len(cases) == len(expected)
    assert sum(suite.failures for suite in xml) == sum(c.outcome == FAILED for c in expected)
    assert sum(suite.skipped for suite in xml) == sum(c.outcome == SKIPPED for c in expected)
    [failure] = [r for r in cases["ttft p50"].result if isinstance(r, Failure)]
    assert failure.message.startswith("ttft p50 regressed: 10.0 -> 15.0 ms") and failure.type == "regression"
    [skipped] = cases["e2e p99"].result
    assert isinstance(skipped, Skipped) and "inconclusive" in skipped.message
    assert cases["ttft p90"].is_passed
    lag = cases["candidate: dispatch lag p99 (ms)"].result[0]
    assert "bad \ufffd byte <&>" in lag.message
    assert {suite.name for suite in xml} == {f"llmreplay compare: {k}" for k in ("fidelity", "latency", "slo", "errors", "sides")}


def test_verdict_csv_has_one_row_per_case_and_no_formulas():
    result = _result({"ttft p50": "regression"})
    result["fidelity"]["checks"][1]["detail"] = "=HYPERLINK(\"http://x\")"
    rows = list(csv.DictReader(io.StringIO(verdict_csv(result))))
    assert tuple(rows[0]) == CASE_COLUMNS
    assert len(rows) == len(gate_cases(result))
    by_name = {r["name"]: r for r in rows}
    assert by_name["streamed share (difference)"]["message"] == "'=HYPERLINK(\"http://x\")"
    assert by_name["ttft p50"]["ratio"] == "1.5" and by_name["ttft p50"]["outcome"] == "failed"
    assert safe_cell("-1") == "'-1" and safe_cell("ok") == "ok"


def test_junit_of_a_report_has_no_latency_cases():
    result = _result({})
    result["mode"] = "report"
    result["errors"]["comparison"] = None
    del result["sides"]["baseline"]
    xml = JUnitXml.fromstring(junit_xml(result).decode())
    assert "llmreplay report: latency" not in {suite.name for suite in xml}
