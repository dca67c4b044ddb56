"""`capacity --junit`: the search's gate as JUnit, read back with junitparser as CI systems do. A case
fails exactly when capacity's exit status is not 0; a step beyond the capacity is information, not a failure."""

from __future__ import annotations

import subprocess

import pytest
from capacity_support import capacity_cmd
from junitparser import Failure, JUnitXml, Skipped

from llmreplay.compare_outputs import junit_of
from replayer.capacity.gate_cases import capacity_cases
from tests.replayer.capacity.test_html import document, step


def _junit(doc: dict, tmp_path) -> dict:
    verdict = {"headline": doc["verdict"]["line"], "exit_code": doc["verdict"]["exit_code"]}
    path = tmp_path / "capacity.xml"
    path.write_bytes(junit_of("capacity", verdict, capacity_cases(doc)))
    return {case.name: case for suite in JUnitXml.fromfile(str(path)) for case in suite}


def _failed(cases: dict) -> set[str]:
    return {name for name, case in cases.items() if any(isinstance(r, Failure) for r in case.result)}


def test_a_search_that_held_has_no_failure_and_tells_each_step(tmp_path):
    cases = _junit(document(), tmp_path)
    assert _failed(cases) == set()
    assert {"capacity", "ttft_p95<=500ms", "error rate"} <= set(cases)
    assert "step 4 (x3, 11.10 req/s offered)" in cases["ttft_p95<=500ms"].system_out  # the sustain step
    beyond = cases["step 2: x4 (search)"]
    assert not beyond.result and "beyond the capacity at 14.80 req/s offered" in beyond.system_out


def test_a_headroom_short_of_the_requirement_fails_with_its_reason(tmp_path):
    short = {"exit_code": 1, "require_headroom": 3.0, "passed": False,
             "line": "headroom 2.55x below the required 3x of production's peak minute"}  # fmt: skip
    cases = _junit(document(verdict=short), tmp_path)
    assert _failed(cases) == {"capacity", "headroom"}
    [failure] = cases["headroom"].result
    assert failure.message == "headroom 2.55x of production's peak minute, required 3x"


def test_no_step_held_fails_the_slos_at_the_first_step_and_a_client_bound_step_is_skipped(tmp_path):
    steps = [step(0, 1.0, 3.6, 640.0, "fail"), step(1, 0.5, 1.8, 560.0, "fail"),
             step(2, 0.25, 0.9, 505.0, "client_bound", fail_reasons=["dispatch lag p99 80 ms over 50 ms"])]  # fmt: skip
    verdict = {"exit_code": 1, "require_headroom": None, "passed": False, "line": "no step held the SLOs"}
    cases = _junit(document(steps=steps, slo_limit=None, headroom=None, verdict=verdict), tmp_path)
    assert _failed(cases) == {"capacity", "ttft_p95<=500ms"}
    [failure] = cases["ttft_p95<=500ms"].result
    assert "step 1 (x0.5" in failure.message and "upper bound 616.0 ms vs 500 ms" in failure.message
    [skipped] = cases["step 2: x0.25 (search)"].result
    assert isinstance(skipped, Skipped) and "dispatch lag p99 80 ms" in skipped.message


@pytest.mark.e2e
def test_a_junit_path_that_cannot_be_written_is_one_line_before_any_step(tmp_path):
    cmd = capacity_cmd(tmp_path / "missing.parquet", "http://127.0.0.1:9", tmp_path / "o", "--junit", str(tmp_path))
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and "--junit" in lines[0], done.stderr
