"""Was the replay faithful to production's shape? Checks run before any latency verdict is trusted.

Each check is a plain dict: check, status (ok / warn / fail / info), the measured values and the
limit. Any `fail` makes the comparison exit 1: latencies of an unfaithful replay prove nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from replayer.compare_requests import Requests

OK, WARN, FAIL, INFO = "ok", "warn", "fail", "info"


@dataclass(frozen=True, slots=True)
class FidelityLimits:
    max_unsent_share: float = 0.01  # shed by --max-inflight or never sent
    max_dispatch_lag_p99_ms: float = 50.0
    max_arrival_error_p99_ms: float = 100.0
    max_output_token_error_p90: float = 0.05  # relative, per request
    max_input_token_error_p90: float = 0.10
    max_mix_difference: float = 0.02  # stream and tool shares, absolute
    max_cached_share_difference: float = 0.20  # warn only: the cache belongs to the engine


def run_checks(label: str, requests: Requests, limits: FidelityLimits) -> list[dict]:
    """A replay run against its own trace: everything sent, on time, with the recorded lengths."""
    checks = []
    unsent = 1.0 - requests.sent.mean()
    checks.append(
        _check(
            f"{label}: requests not sent", unsent <= limits.max_unsent_share, unsent, limits.max_unsent_share
        )
    )
    lag_ms = requests.dispatch_lag_ns[requests.sent & np.isfinite(requests.dispatch_lag_ns)] / 1e6
    if lag_ms.size:
        p50, p99, worst = np.percentile(lag_ms, [50, 99, 100])
        checks.append(
            {
                **_check(f"{label}: dispatch lag p99 (ms)", p99 <= limits.max_dispatch_lag_p99_ms, p99),
                "limit": limits.max_dispatch_lag_p99_ms,
                "detail": f"p50 {p50:.2f} ms, p99 {p99:.2f} ms, max {worst:.2f} ms",
            }
        )
    for name, measured, recorded, limit in (
        (
            "input tokens",
            requests.prompt_tokens,
            requests.shape_prompt_tokens,
            limits.max_input_token_error_p90,
        ),
        (
            "output tokens",
            requests.completion_tokens,
            requests.recorded_completion_tokens,
            limits.max_output_token_error_p90,
        ),
    ):
        checks.append(
            _token_check(f"{label}: {name} vs recorded", requests.success, measured, recorded, limit)
        )
    return [c for c in checks if c is not None]


def _token_check(name: str, success: np.ndarray, measured, recorded, limit: float) -> dict | None:
    mask = success & np.isfinite(measured) & np.isfinite(recorded)
    if not mask.any():
        return {
            "check": name,
            "status": INFO,
            "value": None,
            "limit": limit,
            "detail": "no request with both counts",
        }
    error = np.abs(measured[mask] - recorded[mask]) / np.maximum(recorded[mask], 1.0)
    p50, p90 = np.percentile(error, [50, 90])
    exact = float((measured[mask] == recorded[mask]).mean())
    return {
        **_check(name + " (relative error p90)", p90 <= limit, p90, limit),
        "detail": f"{mask.sum()} requests, exact {exact:.1%}, error p50 {p50:.1%}, p90 {p90:.1%}",
    }


def cross_checks(
    baseline: Requests,
    candidate: Requests,
    common_b: np.ndarray,
    common_c: np.ndarray,
    candidate_scale: float,
    baseline_is_trace: bool,
    limits: FidelityLimits,
) -> list[dict]:
    """Same requests, same mix, same timing: what the two sides should share if the replay is faithful.

    `common_b`/`common_c` index the originals present on both sides, in matching order.
    """
    b_orig, c_orig = int(baseline.original.sum()), int(candidate.original.sum())
    coverage = {
        "check": "requests compared (common ids)",
        "status": OK if common_b.size == b_orig == c_orig else WARN,
        "value": int(common_b.size),
        "limit": None,
        "detail": f"baseline {b_orig}, candidate {c_orig} originals; {common_b.size} in common",
    }
    checks = [coverage]
    for name, b_flags, c_flags in (
        ("streamed share", baseline.stream, candidate.stream),
        ("share with tools", baseline.tools, candidate.tools),
    ):
        b_share, c_share = float(b_flags[baseline.original].mean()), float(c_flags[candidate.original].mean())
        difference = abs(c_share - b_share)
        checks.append(
            {
                **_check(name + " (difference)", difference <= limits.max_mix_difference, difference),
                "limit": limits.max_mix_difference,
                "detail": f"baseline {b_share:.1%}, candidate {c_share:.1%}",
            }
        )
    checks.append(_cached_share_check(baseline, candidate, limits))
    if baseline_is_trace:
        checks.append(_arrival_check(baseline, candidate, common_b, common_c, candidate_scale, limits))
    return [c for c in checks if c is not None]


def _cached_share_check(baseline: Requests, candidate: Requests, limits: FidelityLimits) -> dict | None:
    shares = []
    for side in (baseline, candidate):
        mask = side.success & np.isfinite(side.cached_tokens) & np.isfinite(side.prompt_tokens)
        total = side.prompt_tokens[mask].sum()
        shares.append(float(side.cached_tokens[mask].sum() / total) if total > 0 else None)
    if None in shares:
        return {
            "check": "cached-token share",
            "status": INFO,
            "value": None,
            "limit": None,
            "detail": _shares(shares),
        }
    difference = abs(shares[1] - shares[0])
    status = OK if difference <= limits.max_cached_share_difference else WARN
    return {
        "check": "cached-token share (difference)",
        "status": status,
        "value": difference,
        "limit": limits.max_cached_share_difference,
        "detail": _shares(shares) + " (the prefix cache belongs to the engine: a warning, not a failure)",
    }


def _shares(shares: list) -> str:
    text = ["n/a" if s is None else f"{s:.1%}" for s in shares]
    return f"baseline {text[0]}, candidate {text[1]}"


def _arrival_check(
    baseline: Requests,
    candidate: Requests,
    common_b: np.ndarray,
    common_c: np.ndarray,
    scale: float,
    limits: FidelityLimits,
) -> dict | None:
    """Send time vs trace arrival / speed, minus waits that sessions legitimately add."""
    sent = candidate.sent[common_c]
    if sent.sum() < 2:
        return None
    b_idx, c_idx = common_b[sent], common_c[sent]
    expected = baseline.trace_offset_ns[b_idx] / scale
    wait = np.nan_to_num(candidate.session_wait_ns[c_idx])
    actual = candidate.start_ns[c_idx] - wait
    # Align on the first common request: the replay's clock starts when it starts.
    error_ms = np.abs((actual - actual[0]) - (expected - expected[0])) / 1e6
    p50, p99 = np.percentile(error_ms, [50, 99])
    schedule = candidate.scheduled_offset_ns[c_idx]
    detail = f"speed {scale:g}: error p50 {p50:.2f} ms, p99 {p99:.2f} ms"
    status = OK if p99 <= limits.max_arrival_error_p99_ms else FAIL
    if status == FAIL and np.isfinite(schedule).all():
        schedule_error_ms = np.abs((schedule - schedule[0]) - (expected - expected[0])) / 1e6
        if np.percentile(schedule_error_ms, 99) > limits.max_arrival_error_p99_ms:
            # The replayer's own schedule departs from the trace (idle gaps compressed, windows): by design.
            status = WARN
            detail += "; the replay's schedule itself departs from the trace offsets (time compression?)"
    return {
        "check": "arrival-offset error p99 (ms)",
        "status": status,
        "value": p99,
        "limit": limits.max_arrival_error_p99_ms,
        "detail": detail,
    }


def _check(name: str, ok: bool, value: float, limit: float | None = None) -> dict:
    return {"check": name, "status": OK if ok else FAIL, "value": float(value), "limit": limit, "detail": ""}
