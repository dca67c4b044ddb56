"""One step's run measured over its window: offered and achieved load, goodput, latency percentiles with
CIs, SLO verdicts on the CI's upper bound, errors, whether the client was the limit. Pure over a Side.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

import replayer.compare.slo as compare_slo
import replayer.compare.stats as compare_stats
from replayer.compare import run_fidelity
from replayer.compare.config import BOOTSTRAP_DRAWS, BOOTSTRAP_SEED, CONFIDENCE
from replayer.compare.error_gate import error_counts
from replayer.compare.gate_limits import FidelityLimits
from replayer.compare.inputs import Side
from replayer.compare.latency import samples
from replayer.compare.requests import RequestColumns, build_requests

SHOWN_METRICS = ("ttft", "ttfo", "tpot", "e2e")
SHOWN_PERCENTILES = (50, 95, 99)
SHED = "shed_by_client"
PASS, FAIL, CLIENT_BOUND, INTERRUPTED = "pass", "fail", "client_bound", "interrupted"


@dataclass(frozen=True, slots=True)
class Clock:
    """Where the measured window sits: from the run's first trace request (trace ns), and the time factor."""

    measure_from_ns: int  # window start - first trace offset the run replays (the warm-up's length)
    window_ns: int  # on the trace's clock
    speed: float

    @property
    def run_start_ns(self) -> float:
        return self.measure_from_ns / self.speed

    @property
    def run_seconds(self) -> float:
        return self.window_ns / self.speed / 1e9


def noise(requests: int, precision: float) -> float:
    """The relative change a step's rates can show by chance: max(precision, 2/sqrt(requests))."""
    return max(precision, 2 / math.sqrt(max(1, requests)))


def measure(
    side: Side, clock: Clock, slos: tuple, limits: FidelityLimits, max_error_rate: float, precision: float
) -> dict:
    """The step's row of capacity.json (docs/capacity-format.md), but for index, factor, kind, run_dir."""
    req = build_requests(side)
    measured = req.trace_offset_ns >= clock.measure_from_ns
    seconds = clock.run_seconds
    offered = _offered(req, measured, seconds)
    achieved = _achieved(side, req, clock)
    meets = compare_slo.meets_slos(req.success, req.latency_ns, list(slos))
    good = compare_slo.goodput(meets & measured, req.counted & measured, seconds)
    rng = compare_stats.make_rng(BOOTSTRAP_SEED)
    sample = samples(req, np.arange(len(req)), measured)
    latency = {name: _percentiles(sample.sorted[name], rng) for name in SHOWN_METRICS}
    slo_rows = [_slo_row(slo, sample, rng) for slo in slos]
    errors = _errors(req, measured, max_error_rate)
    lag_p99_ms, bound_reason = _client_bound(side, req, limits)
    row = {
        "offered": offered,
        "achieved": achieved,
        "goodput": good,
        "latency": latency,
        "slos": slo_rows,
        "errors": errors,
        "dispatch_lag_p99_ms": lag_p99_ms,
        "client_bound": bound_reason is not None,
        "client_bound_reason": bound_reason,
        "noise": noise(offered["requests"], precision),
    }
    row["verdict"], row["fail_reasons"] = _verdict(row, side.config.get("stop_reason"))
    return row


def _offered(req: RequestColumns, measured: np.ndarray, seconds: float) -> dict:
    tokens = float(np.nansum(req.recorded_completion_tokens[measured]))
    count = int(measured.sum())
    return {"requests": count, "requests_per_s": count / seconds, "output_tokens_per_s": tokens / seconds}


def _achieved(side: Side, req: RequestColumns, clock: Clock) -> dict:
    """Requests (any, warm-up included) that ended successfully within the window on the run's clock:
    the server's throughput there, which is its capacity once it is saturated."""
    sent = side.table.column("sent_offset_ns").to_numpy(zero_copy_only=False).astype(float)
    e2e = req.latency_ns["e2e"]
    end = sent + e2e
    start = clock.run_start_ns
    inside = req.success & np.isfinite(end) & (end >= start) & (end < start + clock.window_ns / clock.speed)
    seconds = clock.run_seconds
    return {
        "requests_per_s": int(inside.sum()) / seconds,
        "output_tokens_per_s": float(np.nansum(req.completion_tokens[inside])) / seconds,
    }


def _interval(sorted_values: np.ndarray, q: float, rng, effective_n: int | None = None) -> dict:
    value = compare_stats.sorted_quantile(sorted_values, q)
    if value is None:
        return {"value_ms": None, "ci_low_ms": None, "ci_high_ms": None}
    draws = compare_stats.bootstrap_quantile(sorted_values, q, BOOTSTRAP_DRAWS, rng, effective_n)
    tail = (1 - CONFIDENCE) / 2 * 100
    low, high = np.percentile(draws, [tail, 100 - tail])
    return {"value_ms": value / 1e6, "ci_low_ms": float(low) / 1e6, "ci_high_ms": float(high) / 1e6}


def _percentiles(sorted_values: np.ndarray, rng) -> dict:
    out: dict = {"count": int(sorted_values.size)}
    for p in SHOWN_PERCENTILES:
        out[f"p{p}"] = _interval(sorted_values, p / 100, rng)
    return out


def _slo_row(slo, sample, rng) -> dict:
    """The SLO's percentile and its CI; it passes only when the CI's upper bound is within the threshold."""
    per_gap = slo.metric not in compare_slo.GOODPUT_METRICS
    cell = _interval(
        sample.sorted[slo.metric], slo.percentile / 100, rng, sample.itl_requests if per_gap else None
    )
    threshold_ms = slo.threshold_ns / 1e6
    if cell["ci_high_ms"] is None:
        verdict = compare_slo.NO_DATA
    else:
        verdict = compare_slo.PASS if cell["ci_high_ms"] <= threshold_ms else compare_slo.BREACH
    return {
        "slo": slo.text,
        "metric": slo.metric,
        "percentile": slo.percentile,
        "threshold_ms": threshold_ms,
        "value_ms": cell["value_ms"],
        "ci_high_ms": cell["ci_high_ms"],
        "verdict": verdict,
    }


def _errors(req: RequestColumns, measured: np.ndarray, max_error_rate: float) -> dict:
    counts = error_counts(req.error_kind[measured], req.sent[measured], req.success[measured])
    rate = counts["error_rate"]
    return {
        "counted": counts["counted"],
        "engine_errors": counts["engine_errors"],
        "rate": rate,
        "by_kind": counts["by_kind"],
        "over_limit": rate is not None and rate > max_error_rate,
    }


def _client_bound(side: Side, req: RequestColumns, limits: FidelityLimits) -> tuple[float | None, str | None]:
    """(dispatch-lag p99 ms, why the client was the limit or None), over the whole run: the run's own
    dispatch-lag check (replayer.compare.run_fidelity), and requests shed by --max-inflight."""
    never_attempted, stop_reason = run_fidelity.completeness(side.config)
    facts = run_fidelity.run_facts(side.table, never_attempted, stop_reason)
    checks = run_fidelity.run_checks("step", facts, limits)
    lag = next((c for c in checks if "dispatch lag" in c["check"]), None)
    lag_ms = None if lag is None else lag["value"]
    shed = int(sum(kind == SHED for kind in req.error_kind))
    if lag is not None and lag["status"] == run_fidelity.FAIL:
        return lag_ms, f"dispatch lag p99 {lag_ms:.2f} ms over {limits.max_dispatch_lag_p99_ns / 1e6:g} ms"
    if shed:
        return lag_ms, f"{shed} requests shed by --max-inflight"
    return lag_ms, None


def _verdict(row: dict, stop_reason: str | None) -> tuple[str, list[str]]:
    if stop_reason == "interrupted":
        return INTERRUPTED, ["interrupted"]
    if row["client_bound"]:
        return CLIENT_BOUND, [row["client_bound_reason"]]
    reasons = [
        f"{s['slo']}: upper bound {_ms(s['ci_high_ms'])}"
        for s in row["slos"]
        if s["verdict"] != compare_slo.PASS
    ]
    if row["errors"]["over_limit"]:
        reasons.append(f"error rate {row['errors']['rate']:.1%}")
    offered, achieved = row["offered"]["requests_per_s"], row["achieved"]["requests_per_s"]
    if achieved < offered * (1 - row["noise"]):
        reasons.append(f"saturated: achieved {achieved:.2f} req/s of {offered:.2f} offered")
    return (FAIL if reasons else PASS), reasons


def _ms(value: float | None) -> str:
    return "no data" if value is None else f"{value:.1f} ms"
