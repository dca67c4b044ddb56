"""From the measured steps to the answers: the knee, the SLO limit, the operating point, the headroom
against production's busiest minute, a bottleneck hint and the cost. Pure over capacity.json's step rows.
"""

from __future__ import annotations

import numpy as np

import replayer.capacity.noise as noise
from replayer.capacity.measure import CLIENT_BOUND, INTERRUPTED, PASS

KV_FULL = 0.9  # KV usage at or above this share is "near full"


def _judged(steps: list[dict]) -> list[dict]:
    """Steps that say something about the server (not client-bound, not interrupted), by factor."""
    return sorted(
        (s for s in steps if s["verdict"] not in (CLIENT_BOUND, INTERRUPTED)), key=lambda s: s["factor"]
    )


def kept_up(step: dict) -> bool:
    """The server kept up with the step's load (replayer.capacity.measure: achieved and queue growth)."""
    return step["kept_up"]


def _served(step: dict) -> float:
    """The knee's curve: requests per second served within the window meeting every SLO (no SLO:
    achieved throughput)."""
    return step["goodput"]["served_per_s"]


def on_the_line(step: dict) -> bool:
    """Goodput still grows as the load: the server kept up and served the offered rate within every SLO,
    within the noise (replayer.capacity.noise). Past the knee goodput stops growing with the factor."""
    good = step["goodput"]
    offered = step["offered"]["requests_per_s"]
    return step["kept_up"] and not noise.fell_behind(offered, good["served_per_s"], good["served_se_per_s"])


def knee_bracket(steps: list[dict]) -> tuple[float | None, float | None]:
    """(lo, hi]: hi the smallest factor off the line (None: every step on it), lo the largest factor
    below hi on it (None: no step below hi). A factor is on the line when each of its steps is."""
    judged = _judged(steps)
    factors = sorted({s["factor"] for s in judged})
    off = [f for f in factors if not all(on_the_line(s) for s in judged if s["factor"] == f)]
    hi = off[0] if off else None
    below = [f for f in factors if (hi is None or f < hi) and f not in off]
    return (below[-1] if below else None), hi


def knee(steps: list[dict]) -> dict | None:
    """Where goodput stops growing with the load: the bracket (lo, hi], its factor the middle, its rate
    the best goodput served at or below hi (the server's throughput there when no SLO is given)."""
    judged = _judged(steps)
    if not judged:
        return None
    lo, hi = knee_bracket(steps)
    best = max((s for s in judged if hi is None or s["factor"] <= hi), key=_served)
    factor = None if hi is None else (hi if lo is None else (lo + hi) / 2)
    return {
        "factor": factor,
        "bracket": [lo, hi],
        "requests_per_s": _served(best),
        "output_tokens_per_s": best["achieved"]["output_tokens_per_s"] * (best["goodput"]["share"] or 0.0),
        "reached": hi is not None,
        "noise": best["noise"],
        "basis": "goodput" if best["slos"] else "achieved_throughput",
        "note": "goodput left the offered load's line between lo and hi"
        if hi is not None
        else "not reached: goodput still grew with the load at the largest factor tried",
    }


def slo_limit(
    steps: list[dict], confirmed: float | None, last_pass: float | None, first_fail: float | None
) -> dict | None:
    """The largest factor with every SLO met: the confirmed one when a sustain step held, else the
    search's last pass (unconfirmed); None when no step passed."""
    factor = confirmed if confirmed is not None else last_pass
    if factor is None:
        return None
    at = [s for s in steps if s["factor"] == factor and s["verdict"] == PASS]
    if not at:
        return None
    step = at[-1]  # the sustain step when there is one
    return {
        "factor": factor,
        "confirmed": confirmed is not None,
        "offered_requests_per_s": step["offered"]["requests_per_s"],
        "offered_output_tokens_per_s": step["offered"]["output_tokens_per_s"],
        "bracket": [last_pass, first_fail],
    }


def operating_point(limit: dict | None, headroom_target: float) -> dict | None:
    """`headroom_target` of the SLO limit: the load the factor scales linearly."""
    if limit is None:
        return None
    return {
        "factor": limit["factor"] * headroom_target,
        "headroom_target": headroom_target,
        "offered_requests_per_s": limit["offered_requests_per_s"] * headroom_target,
        "offered_output_tokens_per_s": limit["offered_output_tokens_per_s"] * headroom_target,
    }


def headroom(limit: dict | None, peak_requests_per_s: float) -> dict | None:
    """The SLO limit's offered rate over production's busiest-minute rate."""
    if limit is None or peak_requests_per_s <= 0:
        return None
    factor = limit["offered_requests_per_s"] / peak_requests_per_s
    return {
        "factor": factor,
        "production_peak_requests_per_s": peak_requests_per_s,
        "slo_limit_requests_per_s": limit["offered_requests_per_s"],
        "text": f"staging holds {factor:.2f}x production's peak minute within the SLOs",
    }


def bottleneck(steps: list[dict], limit: dict | None) -> dict:
    """A hint from the server metrics of the first step past the limit (else the limit's own step)."""
    judged = _judged(steps)
    factor = None if limit is None else limit["factor"]
    above = [s for s in judged if factor is None or s["factor"] > factor]
    at = above[0] if above else (judged[-1] if judged else None)
    metrics = None if at is None else at.get("server_metrics")
    if not metrics:
        return {
            "kind": "unknown",
            "reason": "no server metrics at the limit (none scraped, or the engine names none)",
        }
    kv, preempted = metrics.get("peak_kv_cache_usage"), metrics.get("preemptions")
    waiting = metrics.get("peak_waiting")
    where = f"at x{at['factor']:g}"
    if (preempted or 0) > 0 or (kv is not None and kv >= KV_FULL):
        return {
            "kind": "memory",
            "reason": f"{where}: KV-cache usage peaked at {_share(kv)}, {preempted or 0:g} preemptions",
        }
    if (waiting or 0) > 0:
        return {
            "kind": "compute",
            "reason": f"{where}: up to {waiting:g} requests waited while KV-cache usage stayed at {_share(kv)} "
            "(compute or scheduling: the batch slots were full)",
        }
    return {
        "kind": "none",
        "reason": f"{where}: no queue formed at the server (look at the client or the network)",
    }


def _share(value: float | None) -> str:
    return "unknown" if value is None else f"{value:.0%}"


def cost(steps: list[dict], point: dict | None, gpu_hour_cost: float | None, gpus: int | None) -> dict | None:
    """Cost per million output tokens and per request at the operating point, the throughput there
    interpolated between the measured steps that kept up."""
    if point is None or gpu_hour_cost is None or gpus is None:
        return None
    judged = [s for s in _judged(steps) if kept_up(s)]
    if not judged:
        return None
    factors = [s["factor"] for s in judged]
    rps = float(np.interp(point["factor"], factors, [s["achieved"]["requests_per_s"] for s in judged]))
    tps = float(np.interp(point["factor"], factors, [s["achieved"]["output_tokens_per_s"] for s in judged]))
    per_hour = gpu_hour_cost * gpus
    return {
        "gpu_hour_cost": gpu_hour_cost,
        "gpus": gpus,
        "per_million_output_tokens": per_hour / (tps * 3600) * 1e6 if tps > 0 else None,
        "per_request": per_hour / (rps * 3600) if rps > 0 else None,
        "interpolated": True,
        "note": "throughput at the operating point interpolated between measured steps",
    }


def verdict(limit: dict | None, room: dict | None, require_headroom: float | None, stop_reason: str) -> dict:
    """Exit 130 interrupted; 1 when no step passed or --require-headroom is not met; else 0."""
    if stop_reason == "interrupted":
        return {
            "exit_code": 130,
            "require_headroom": require_headroom,
            "passed": False,
            "line": "interrupted",
        }
    if limit is None:
        line, ok = "no step held the SLOs", False
    elif require_headroom is not None and (room is None or room["factor"] < require_headroom):
        got = "unknown" if room is None else f"{room['factor']:.2f}x"
        line, ok = (
            f"headroom {got} below the required {require_headroom:g}x of production's peak minute",
            False,
        )
    else:
        line = room["text"] if room else f"SLO limit at x{limit['factor']:g}"
        ok = True
    return {"exit_code": 0 if ok else 1, "require_headroom": require_headroom, "passed": ok, "line": line}
