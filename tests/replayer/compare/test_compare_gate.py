"""The deploy gate's verdict, case by case, through `llmreplay report` and `compare` on real run files:
interrupted runs, failed requests, identical data, one fidelity definition, like with like, the headline."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from compare_fixtures import Shape, latencies_ns, write_run

from llmreplay.cli import cli
from llmreplay.run_format import RESULTS_FILE
from replayer.results.summary import summarize

SHAPE = Shape(n=400, seed=5, interval_ms=10.0)


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def run_json(*args: str) -> tuple[int, dict]:
    out = invoke(*args, "--json")
    return out.exit_code, json.loads(out.output)


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    root = tmp_path_factory.mktemp("gate")
    ttft, tpot = latencies_ns(SHAPE, seed=1)
    write_run(root / "baseline", SHAPE, ttft, tpot)
    write_run(root / "same", SHAPE, ttft, tpot)
    return root, ttft, tpot


def check(result: dict, prefix: str) -> dict:
    return next(c for c in result["fidelity"]["checks"] if c["check"].startswith(prefix))


# --- interrupted runs fail -----------------------------------------------------------------------------


def test_an_interrupted_run_is_never_faithful(base, tmp_path):
    root, ttft, tpot = base
    shape = Shape(n=48, seed=5, interval_ms=10.0)  # 48 rows written, 12 planned requests never sent
    t, p = latencies_ns(shape, seed=1)
    run = write_run(tmp_path / "cut", shape, t, p, stop_reason="interrupted", not_sent=12)
    code, result = run_json("report", str(run))
    assert code == 1
    assert result["verdict"]["headline"] == (
        "FAIL: replay not faithful: interrupted after 48 of 60 requests; 12 of 60 requests not sent (20.0% > 1%)"
    )
    assert check(result, "run: requests not sent")["value"] == pytest.approx(0.2)
    assert result["sides"]["run"]["planned"] == 60 and result["sides"]["run"]["sent"] == 48
    text = invoke("report", str(run)).output
    assert text.splitlines()[0].startswith("FAIL: replay not faithful: interrupted after 48 of 60 requests")

    code, result = run_json("compare", str(root / "baseline"), str(run))
    assert code == 1 and result["fidelity"]["unfaithful"]
    assert check(result, "candidate: requests not sent")["value"] == pytest.approx(0.2)
    assert "unfaithful replay: candidate: interrupted after 48 of 60 requests" in result["verdict"]["reasons"]


def test_a_run_stopped_by_duration_is_complete(tmp_path):
    t, p = latencies_ns(SHAPE, seed=1)
    run = write_run(tmp_path / "short", SHAPE, t, p, stop_reason="duration")
    code, result = run_json("report", str(run))
    assert code == 0, result["verdict"]
    assert check(result, "run: run completed")["status"] == "ok"


# --- failed requests fail ------------------------------------------------------------------------------


def test_every_request_failing_fails_and_says_why(base, tmp_path):
    root, ttft, tpot = base
    errors = {i: "http_5xx" for i in range(SHAPE.n)}
    body = '{"error": {"message": "CUDA out of memory (request %d)", "type": "server_error"}}'
    details = {i: body % i for i in range(SHAPE.n)}
    run = write_run(tmp_path / "broken", SHAPE, ttft, tpot, errors=errors, error_details=details)
    code, result = run_json("report", str(run))
    assert code == 1
    assert "error rate 100.0% > 1% (http_5xx 400)" in result["verdict"]["headline"]
    top = result["errors"]["run"]["top_messages"]
    # 400 bodies that differ only in a number are one message, shown by its first example
    assert top == [
        {"kind": "http_5xx", "status": 500, "message": "CUDA out of memory (request 0)", "count": 400}
    ]
    assert "400 x http_5xx 500: CUDA out of memory (request 0)" in invoke("report", str(run)).output

    code, result = run_json("compare", str(root / "baseline"), str(run))
    assert code == 1
    assert result["errors"]["comparison"]["verdict"] == "regression"
    assert any(r.startswith("error rate 100.0% > 1%") for r in result["verdict"]["reasons"])


def test_error_rate_gate_absolute_and_relative(base, tmp_path):
    root, ttft, tpot = base
    errors = {i: "http_5xx" for i in range(0, SHAPE.n, 12)}  # 34 of 400: 8.5 %
    run = write_run(tmp_path / "some", SHAPE, ttft, tpot, errors=errors)
    code, result = run_json("report", str(run))
    assert code == 1 and result["verdict"]["reasons"] == ["error rate 8.5% > 1% (http_5xx 34)"]
    code, result = run_json("report", str(run), "--max-error-rate", "10%")
    assert code == 0, result["verdict"]
    # against a clean baseline the rise is significant: it fails however high the absolute limit
    code, result = run_json("compare", str(root / "baseline"), str(run), "--max-error-rate", "10%")
    assert code == 1
    assert result["verdict"]["reasons"] == ["error rate up +8.5 points (CI +5.8 to +11.2)"]
    code, _ = run_json(
        "compare",
        str(root / "baseline"),
        str(run),
        "--max-error-rate",
        "10%",
        "--error-rate-tolerance",
        "20%",
    )
    assert code == 0


# --- identical data passes -----------------------------------------------------------------------------


def test_a_small_run_compared_with_itself_is_no_change_and_warns_about_p99(tmp_path):
    shape = Shape(n=48, seed=2)
    t, p = latencies_ns(shape, seed=3)
    a = write_run(tmp_path / "a", shape, t, p)
    code, result = run_json("compare", str(a), str(a))
    assert code == 0
    cells = [cell for n, m in result["latency"].items() if n != "ttfo" for cell in m["comparison"].values()]
    assert {cell["verdict"] for cell in cells} == {"no_change"}  # TTFO has no data: nothing reasoned
    assert {(cell["ci_low"], cell["ci_high"]) for cell in cells} == {(1.0, 1.0)}
    assert [c["few_samples"] for c in result["latency"]["e2e"]["comparison"].values()] == [
        False,
        True,
        True,
        True,
    ]
    assert result["warnings"] == [
        "too few values for p90, p95 (at least 100, 200 needed: 10 beyond the percentile): ttft (37 / 37), "
        "tpot (37 / 37), e2e (48 / 48); read them as indicative",
        "too few values for p99 (at least 1,000 needed: 10 beyond the percentile): ttft (37 / 37), "
        "tpot (37 / 37), itl (838 / 838), e2e (48 / 48); read it as indicative",
    ]
    assert "warning: too few values for p99" in invoke("compare", str(a), str(a)).output


def test_fail_on_inconclusive_makes_a_strict_gate(base, tmp_path):
    root, ttft, tpot = base
    noisy = (ttft * np.random.default_rng(4).lognormal(0.03, 0.1, SHAPE.n)).astype(np.int64)
    run = write_run(tmp_path / "noisy", SHAPE, noisy, tpot)
    code, result = run_json("compare", str(root / "baseline"), str(run))
    assert code == 0
    assert (
        result["verdict"]["headline"]
        == "GO: no latency regression, 3 of 16 cells inconclusive; replay faithful"
    )
    code, result = run_json("compare", str(root / "baseline"), str(run), "--fail-on-inconclusive")
    assert code == 1
    assert any(r.startswith("ttft inconclusive at p") for r in result["verdict"]["reasons"])
    assert "latency cells inconclusive (--fail-on-inconclusive)" in result["verdict"]["headline"]


# --- one fidelity definition -----------------------------------------------------------------------------


def test_replay_report_and_compare_share_the_dispatch_lag_limit(base, tmp_path):
    root, ttft, tpot = base
    run = write_run(tmp_path / "late", SHAPE, ttft, tpot, lag_ns=9_020_000)  # 9.02 ms, over the 5 ms default
    phrase = "dispatch lag p99 9.02 ms > 5 ms (--max-dispatch-lag)"
    replay = summarize(pq.read_table(run / RESULTS_FILE), stop_reason="completed")
    assert replay["verdict"]["exit_code"] == 1 and phrase in replay["verdict"]["headline"]
    code, result = run_json("report", str(run))
    assert code == 1 and phrase in result["verdict"]["headline"]
    code, result = run_json("compare", str(root / "baseline"), str(run))
    assert code == 1 and f"unfaithful replay: candidate: {phrase}" in result["verdict"]["reasons"]
    code, _ = run_json("compare", str(root / "baseline"), str(run), "--max-dispatch-lag", "10ms")
    assert code == 0
    code, _ = run_json("report", str(run), "--max-dispatch-lag", "10ms")
    assert code == 0


# --- like with like ------------------------------------------------------------------------------------


def test_different_load_refuses_a_latency_verdict_unless_asked(base, tmp_path):
    root, ttft, tpot = base
    fast = write_run(tmp_path / "2x", SHAPE, ttft, tpot, speed=2.0)
    code, result = run_json("compare", str(root / "baseline"), str(fast))
    assert code == 1
    load = check(result, "same load")
    assert (
        load["status"] == "fail"
        and "baseline speed 1x, scale 1; candidate speed 2x, scale 1" in load["detail"]
    )
    latency = result["latency"]
    assert {c["verdict"] for n, m in latency.items() if n != "ttfo" for c in m["comparison"].values()} == {
        "different_load"
    }
    assert not result["fidelity"]["unfaithful"]  # the replay was faithful: it is the question that differs
    assert result["verdict"]["headline"].startswith(
        "NO-GO: latency not compared: different load (baseline 1x/scale 1, candidate 2x/scale 1)"
    )
    code, result = run_json("compare", str(root / "baseline"), str(fast), "--allow-different-load")
    assert code == 0 and check(result, "same load")["status"] == "warn"
    assert result["verdict"]["headline"] == "GO: no latency change beyond ±10%; replay faithful"


def test_scale_counts_as_load(base, tmp_path):
    root, ttft, tpot = base
    heavier = write_run(
        tmp_path / "heavy", SHAPE, ttft, tpot, config={"config": {"schedule": {"scale": 2.0}}}
    )
    code, result = run_json("compare", str(root / "baseline"), str(heavier))
    assert code == 1 and check(result, "same load")["status"] == "fail"


# --- the headline --------------------------------------------------------------------------------------


def test_headline_names_every_metric_that_moved(base, tmp_path):
    root, ttft, tpot = base
    slower = write_run(
        tmp_path / "slower", SHAPE, (ttft * 4.4).astype(np.int64), (tpot * 3.9).astype(np.int64)
    )
    code, result = run_json("compare", str(root / "baseline"), str(slower), "--slo", "e2e_p99<=60s")
    assert code == 1
    headline = result["verdict"]["headline"]
    assert headline.startswith(  # p99 needs 1,000 values to call a change: ITL's gaps have them
        "NO-GO: TTFT ≈4.4× (CI 4.4–4.4) and TPOT ≈3.9× (CI 3.9–3.9) and E2E ≈4.0× (CI 3.8–4.3) slower at "
        "p50, p90, p95; ITL ≈3.9× (CI 3.9–3.9) slower at every percentile"
    )
    assert headline.endswith("SLOs still met; replay faithful")
    improved = write_run(tmp_path / "faster", SHAPE, (ttft * 0.5).astype(np.int64), tpot)
    code, result = run_json("compare", str(root / "baseline"), str(improved))
    assert code == 0
    assert result["verdict"]["headline"].startswith("GO: TTFT ≈2.0× (CI 2.0–2.0) faster at p50, p90, p95")
