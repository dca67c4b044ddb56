"""Did the two sides carry the same traffic (requests, mix, arrival times, load)? Checked before any
latency verdict is trusted; a run's own checks are replayer.judge.run_fidelity's, in the same
plain dicts. Any `fail` makes the comparison exit 1."""

from __future__ import annotations

import numpy as np

from replayer.judge.gate_limits import FidelityLimits
from replayer.judge.run_fidelity import (
    FAIL,
    LOAD_CHECK,
    OK,
    WARN,
    cached_share,
    cached_share_check,
    check_row,
)
from replayer.measured.requests import RequestColumns

CACHE_BLOCK_TOKENS = 16  # one engine KV-cache block: cached counts closer than this are the same hit


def load_check(b_load: dict, c_load: dict, same: bool, allowed: bool) -> dict:
    """Like with like: a 2x replay is not the 1x baseline's traffic, so its latencies are not comparable.

    `fail` refuses the latency verdicts (the gate fails); `--allow-different-load` makes it a warning."""
    detail = (
        f"baseline speed {b_load['speed']:g}x, scale {b_load['scale']:g}; "
        f"candidate speed {c_load['speed']:g}x, scale {c_load['scale']:g}"
    )
    if not (b_load["stated"] and c_load["stated"]):
        detail += " (estimated where run.json does not say)"
    if same:
        status = OK
    else:
        status = WARN if allowed else FAIL
        detail += (
            "; latencies compared anyway (--allow-different-load)"
            if allowed
            else "; latency not compared: pass --allow-different-load to compare anyway"
        )
    return {
        "check": LOAD_CHECK,
        "status": status,
        "value": None,
        "limit": None,
        "detail": detail,
        "summary": f"different load (baseline {b_load['speed']:g}x/scale {b_load['scale']:g}, "
        f"candidate {c_load['speed']:g}x/scale {c_load['scale']:g})",
    }


def cross_checks(
    baseline: RequestColumns,
    candidate: RequestColumns,
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
        **check_row("requests compared (common ids)", True, common_b.size),
        "status": OK if common_b.size == b_orig == c_orig else WARN,
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
                **check_row(
                    name + " (difference)",
                    difference <= limits.max_mix_difference,
                    difference,
                    limits.max_mix_difference,
                ),
                "detail": f"baseline {b_share:.1%}, candidate {c_share:.1%}",
                "summary": f"{name} differs by {difference:.1%} > {limits.max_mix_difference:.0%}",
            }
        )
    checks.append(_cached_share_check(baseline, candidate, limits))
    if baseline_is_trace:
        checks.append(_arrival_check(baseline, candidate, common_b, common_c, candidate_scale, limits))
    return [c for c in checks if c is not None]


def _cached_share_check(
    baseline: RequestColumns, candidate: RequestColumns, limits: FidelityLimits
) -> dict | None:
    """The share of prompt tokens read from the prefix cache on each side (more than
    --max-cached-share-difference apart fails), beside the share written to it where a side reports
    writes (Anthropic's)."""
    section = cache_section(baseline, candidate, limits)
    return cached_share_check(
        "cached-token share",
        ("baseline", "candidate"),
        [section[s]["cached_share"] for s in ("baseline", "candidate")],
        [section[s]["write_share"] for s in ("baseline", "candidate")],
        limits.max_cached_share_difference,
    )


def cache_section(baseline: RequestColumns, candidate: RequestColumns, limits: FidelityLimits) -> dict:
    """Each side's cached-token (and cache-write) share of prompt tokens, and their difference."""
    out = {
        label: {
            "cached_share": cached_share(side.success, side.prompt_tokens, side.cached_tokens),
            "write_share": cached_share(side.success, side.prompt_tokens, side.cache_write_tokens),
        }
        for label, side in (("baseline", baseline), ("candidate", candidate))
    }
    b, c = out["baseline"]["cached_share"], out["candidate"]["cached_share"]
    out["difference"] = None if b is None or c is None else c - b
    out["limit"] = limits.max_cached_share_difference
    return out


def cached_token_pairs(b_cached: np.ndarray, c_cached: np.ndarray) -> dict:
    """Per paired request (same request on both sides, NaN where a side reports none): how often the
    cached tokens differ by more than one engine block, and the p50/p90 of the absolute difference."""
    ok = np.isfinite(b_cached) & np.isfinite(c_cached)
    difference = c_cached[ok] - b_cached[ok]
    if not difference.size:
        return {"count": 0, "block_tokens": CACHE_BLOCK_TOKENS}
    apart = np.abs(difference)
    p50, p90 = np.percentile(apart, [50, 90])
    return {
        "count": int(difference.size),
        "block_tokens": CACHE_BLOCK_TOKENS,
        "share_differ": float((apart > CACHE_BLOCK_TOKENS).mean()),
        "share_fewer": float((difference < -CACHE_BLOCK_TOKENS).mean()),  # the candidate cached less
        "abs_difference_p50": float(p50),
        "abs_difference_p90": float(p90),
    }


def _arrival_check(
    baseline: RequestColumns,
    candidate: RequestColumns,
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
        **check_row("arrival-offset error p99 (ms)", True, p99, limits.max_arrival_error_p99_ms),
        "status": status,
        "detail": detail,
        "summary": f"arrival offsets off by {p99:.0f} ms (p99) > {limits.max_arrival_error_p99_ms:g} ms",
    }
