"""One step's run measured over its window: offered and achieved load, goodput, latency percentiles with
CIs, SLO verdicts on the CI's upper bound, errors, cold start, whether the server kept up or the client
was the limit. Requests close in time share the server's fate (a batch, a queue): every CI counts them as
the effective sample their autocorrelation leaves (replayer.judge.time_blocks), not one draw each.
Pure over a Side whose table holds the measured rows (the warm-up rows are Side.warmup).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import replayer.capacity.noise as noise
import replayer.judge.slo as judge_slo
import replayer.judge.stats as judge_stats
from llmreplay.metrics import METRICS, success_mask
from replayer.judge import run_fidelity, time_blocks
from replayer.judge.error_gate import error_counts
from replayer.judge.gate_limits import BOOTSTRAP_DRAWS, BOOTSTRAP_SEED, CONFIDENCE, FidelityLimits
from replayer.measured.requests import RequestColumns, build_requests
from replayer.measured.samples import samples
from replayer.measured.side import Side

SHOWN_METRICS = ("ttft", "ttfo", "tpot", "e2e")
SHOWN_PERCENTILES = (50, 95, 99)
SHED = "shed_by_client"
PASS, FAIL, CLIENT_BOUND, INTERRUPTED = "pass", "fail", "client_bound", "interrupted"
MIN_TREND_REQUESTS = 9  # fewer measured requests: no queue trend is judged
QUEUE_GROWTH = 2.0  # late median TTFT over early p95 that says a queue grew


@dataclass(frozen=True, slots=True)
class Clock:
    """Where the measured window sits on the run's clock (ns from the run's start): after the warm-up."""

    start_ns: float  # run.json phases.measured_start_offset_s: the warm-up's length / speed
    length_ns: float  # the window's trace length / speed

    @property
    def seconds(self) -> float:
        return self.length_ns / 1e9


def measure(side: Side, clock: Clock, slos: tuple, limits: FidelityLimits, max_error_rate: float) -> dict:
    """The step's row of capacity.json (docs/capacity-format.md), but for index, factor, kind, run_dir."""
    req = build_requests(side)
    everyone = np.ones(len(req), dtype=bool)
    offered = _offered(req, clock.seconds)
    achieved = _achieved(side, req, clock)
    meets = judge_slo.meets_slos(req.success, req.latency_ns, list(slos))
    good = judge_slo.goodput(meets, req.counted, clock.seconds)
    share = good["share"] if good["share"] is not None else 0.0
    good["served_per_s"] = achieved["requests_per_s"] * share
    good["served_se_per_s"] = achieved["se_per_s"] * share
    rng = judge_stats.make_rng(BOOTSTRAP_SEED)
    sample = samples(req, np.arange(len(req)), everyone)
    dependence = _dependence(_series(req))
    lag_p99_ms, bound_reason = _client_bound(side, req, limits)
    rate = achieved["requests_per_s"]
    row = {
        "offered": offered,
        "achieved": achieved,
        "goodput": good,
        "latency": {name: _percentiles(sample.sorted[name], rng, dependence[name]) for name in SHOWN_METRICS},
        "slos": [_slo_row(slo, sample, rng, dependence[slo.metric]) for slo in slos],
        "dependence": {name: found.as_dict() for name, found in dependence.items()},
        "errors": _errors(req, everyone, max_error_rate),
        "cold_start": cold_start(side),
        "dispatch_lag_p99_ms": lag_p99_ms,
        "client_bound": bound_reason is not None,
        "client_bound_reason": bound_reason,
        "noise": noise.band_per_s(achieved["se_per_s"]) / rate if rate > 0 else None,
    }
    row["kept_up"], row["saturation_reason"] = _kept_up(row, req)
    row["verdict"], row["fail_reasons"] = _verdict(row, run_fidelity.completeness(side.run)[1])
    return row


def cold_start(side: Side) -> dict:
    """The replay's first requests (its warm-up rows), in no verdict: their count and TTFT p50/p95."""
    warm = side.warmup
    if warm is None or warm.num_rows == 0:
        return {"requests": 0, "ttft_p50_ms": None, "ttft_p95_ms": None}
    ttft = warm.column("ttft_ns").to_numpy(zero_copy_only=False).astype(float)
    ttft = np.sort(ttft[success_mask(warm) & np.isfinite(ttft)])
    p50, p95 = (judge_stats.sorted_quantile(ttft, q) for q in (0.5, 0.95))
    return {
        "requests": int(warm.num_rows),
        "ttft_p50_ms": None if p50 is None else p50 / 1e6,
        "ttft_p95_ms": None if p95 is None else p95 / 1e6,
    }


def _offered(req: RequestColumns, seconds: float) -> dict:
    tokens = float(np.nansum(req.recorded_completion_tokens))
    return {
        "requests": len(req),
        "requests_per_s": len(req) / seconds,
        "output_tokens_per_s": tokens / seconds,
    }


def _ends(table) -> tuple[np.ndarray, np.ndarray]:
    """(run-clock end ns, completion tokens) of a results table's successful rows."""
    sent = table.column("sent_offset_ns").to_numpy(zero_copy_only=False).astype(float)
    e2e = table.column("e2e_ns").to_numpy(zero_copy_only=False).astype(float)
    tokens = table.column("completion_tokens").to_numpy(zero_copy_only=False).astype(float)
    end = sent + e2e
    keep = success_mask(table) & np.isfinite(end)
    return end[keep], tokens[keep]


def _achieved(side: Side, req: RequestColumns, clock: Clock) -> dict:
    """The server's completions (any row, warm-up ones too) within the window shifted by the measured
    rows' median E2E: where the window's arrivals end while it keeps up, its throughput once saturated."""
    pieces = [_ends(t) for t in (side.table, side.warmup) if t is not None and t.num_rows]
    end = np.concatenate([p[0] for p in pieces]) if pieces else np.zeros(0)
    tokens = np.concatenate([p[1] for p in pieces]) if pieces else np.zeros(0)
    e2e = req.latency_ns["e2e"][req.success]
    e2e = e2e[np.isfinite(e2e)]
    shift_ns = float(np.median(e2e)) if e2e.size else 0.0
    start = clock.start_ns + shift_ns
    inside = (end >= start) & (end < start + clock.length_ns)
    return {
        "requests_per_s": int(inside.sum()) / clock.seconds,
        "output_tokens_per_s": float(np.nansum(tokens[inside])) / clock.seconds,
        "se_per_s": noise.rate_se_per_s(end, start, clock.length_ns),
        "shift_ms": shift_ns / 1e6,
    }


def _queue_grew(req: RequestColumns) -> str | None:
    """A queue growing over the window: the last third's median TTFT (E2E where no TTFT) above
    QUEUE_GROWTH x the first third's p95, by send time. Service time alone does not double a tail."""
    ttft, e2e = req.latency_ns["ttft"], req.latency_ns["e2e"]
    wait = np.where(np.isfinite(ttft), ttft, e2e)
    ok = req.success & np.isfinite(req.start_ns) & np.isfinite(wait)
    if ok.sum() < MIN_TREND_REQUESTS:
        return None
    ordered = wait[ok][np.argsort(req.start_ns[ok], kind="stable")]
    third = len(ordered) // 3
    early_p95, late_p50 = float(np.percentile(ordered[:third], 95)), float(np.median(ordered[-third:]))
    if late_p50 <= QUEUE_GROWTH * early_p95:
        return None
    return (
        f"the queue grew across the window (late median TTFT {late_p50 / 1e6:.0f} ms, "
        f"early p95 {early_p95 / 1e6:.0f} ms)"
    )


def _kept_up(row: dict, req: RequestColumns) -> tuple[bool, str | None]:
    """The server kept up: achieved within the noise of offered, and no queue growing over the window."""
    offered, achieved = row["offered"]["requests_per_s"], row["achieved"]
    if noise.fell_behind(offered, achieved["requests_per_s"], achieved["se_per_s"]):
        return False, f"achieved {achieved['requests_per_s']:.2f} req/s of {offered:.2f} offered"
    grew = _queue_grew(req)
    return grew is None, grew


def _series(req: RequestColumns) -> dict[str, np.ndarray]:
    """Per request metric, the successful requests' values in send order."""
    order = np.argsort(req.start_ns, kind="stable")
    found = {}
    for name in judge_slo.GOODPUT_METRICS:
        values = req.latency_ns[name][order]
        found[name] = values[req.success[order] & np.isfinite(values) & (values > 0)]
    return found


def _dependence(series: dict[str, np.ndarray]) -> dict[str, time_blocks.Dependence]:
    """Per metric, how strongly neighbouring requests' values move together (its log values, by compare's
    rule); ITL (per gap) takes TPOT's, its per-request counterpart. The values' own time, not the quantile
    indicator's (smaller): on simulated steps at their SLO only the former let the upper bound cover the
    true p95 about as often as it claims (95% against 88%)."""
    found = {name: time_blocks.dependence({name: np.log(values)}) for name, values in series.items()}
    return found | {metric.name: found["tpot"] for metric in METRICS if metric.per_gap}


def _effective(count: int, dependence: time_blocks.Dependence) -> int | None:
    """`count` correlated values as independent ones (None: no fewer than they are)."""
    tau = dependence.autocorrelation_time
    return None if tau <= 1.0 else max(1, int(count / tau))


def _interval(sorted_values: np.ndarray, q: float, rng, effective_n: int | None = None) -> dict:
    value = judge_stats.sorted_quantile(sorted_values, q)
    if value is None:
        return {"value_ms": None, "ci_low_ms": None, "ci_high_ms": None}
    draws = judge_stats.bootstrap_quantile(sorted_values, q, BOOTSTRAP_DRAWS, rng, effective_n)
    tail = (1 - CONFIDENCE) / 2 * 100
    low, high = np.percentile(draws, [tail, 100 - tail])
    return {"value_ms": value / 1e6, "ci_low_ms": float(low) / 1e6, "ci_high_ms": float(high) / 1e6}


def _percentiles(sorted_values: np.ndarray, rng, dependence: time_blocks.Dependence) -> dict:
    out: dict = {"count": int(sorted_values.size)}
    effective_n = _effective(sorted_values.size, dependence)
    for p in SHOWN_PERCENTILES:
        out[f"p{p}"] = _interval(sorted_values, p / 100, rng, effective_n)
    return out


def _slo_row(slo, sample, rng, dependence: time_blocks.Dependence) -> dict:
    """The SLO's percentile and its CI; it passes only when the CI's upper bound is within the threshold.
    ITL gaps count as the requests behind them, those as their effective sample."""
    values = sample.sorted[slo.metric]
    per_gap = slo.metric not in judge_slo.GOODPUT_METRICS
    count = sample.itl_requests if per_gap else values.size
    effective_n = _effective(count, dependence)
    if per_gap and effective_n is None:
        effective_n = count
    cell = _interval(values, slo.percentile / 100, rng, effective_n)
    threshold_ms = slo.threshold_ns / 1e6
    if cell["ci_high_ms"] is None:
        verdict = judge_slo.NO_DATA
    else:
        verdict = judge_slo.PASS if cell["ci_high_ms"] <= threshold_ms else judge_slo.BREACH
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
    dispatch-lag check (replayer.judge.run_fidelity), and requests shed by --max-inflight."""
    never_attempted, stop_reason = run_fidelity.completeness(side.run)
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
        if s["verdict"] != judge_slo.PASS
    ]
    if row["errors"]["over_limit"]:
        reasons.append(f"error rate {row['errors']['rate']:.1%}")
    if not row["kept_up"]:
        reasons.append(f"saturated: {row['saturation_reason']}")
    return (FAIL if reasons else PASS), reasons


def _ms(value: float | None) -> str:
    return "no data" if value is None else f"{value:.1f} ms"
