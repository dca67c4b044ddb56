"""A capacity search as the gate's cases (llmreplay.compare_format.GateCase), for `capacity --junit`: the
search's verdict and the headroom it requires; each SLO and the error rate at the SLO limit (at the
first step when none held); each step, which is information: a step beyond the capacity is what a search
looks for, so it never fails. A case fails exactly when capacity's exit status is not 0."""

from __future__ import annotations

from llmreplay.compare_format import FAILED, PASSED, SKIPPED, GateCase
from replayer.capacity.measure import CLIENT_BOUND, INTERRUPTED, PASS


def capacity_cases(document: dict) -> list[GateCase]:
    verdict = document.get("verdict") or {}
    failed = verdict.get("exit_code", 0) != 0
    cases = [GateCase("search", "capacity", FAILED if failed else PASSED, _word(verdict), verdict.get("line", ""))]
    required = verdict.get("require_headroom")
    if required is not None:
        room = document.get("headroom")
        factor = None if room is None else room["factor"]
        held = factor is not None and factor >= required
        seen = "unknown" if factor is None else f"{factor:.2f}x"
        cases.append(
            GateCase(
                "search", "headroom", PASSED if held else FAILED, "pass" if held else "fail",
                f"headroom {seen} of production's peak minute, required {required:g}x", value=factor, limit=required,
            )
        )  # fmt: skip
    step = _judged_step(document)
    if step is not None:
        cases += [_slo_case(slo, step) for slo in step.get("slos") or []]
        cases.append(_error_case(step, document))
    cases += [_step_case(s) for s in document.get("steps") or []]
    return cases


def _word(verdict: dict) -> str:
    if verdict.get("exit_code") == 130:
        return "interrupted"
    return "pass" if verdict.get("passed") else "fail"


def _judged_step(document: dict) -> dict | None:
    """The step the SLO cases speak of: the SLO limit's (its last, the sustain step when there is one),
    or the first measured step when no step held."""
    steps = [s for s in document.get("steps") or [] if s.get("verdict") not in (CLIENT_BOUND, INTERRUPTED)]
    limit = document.get("slo_limit")
    if limit is not None:
        at = [s for s in steps if s["factor"] == limit["factor"] and s["verdict"] == PASS]
        if at:
            return at[-1]
    return min(steps, key=lambda s: s["factor"], default=None)


def _where(step: dict) -> str:
    return f"step {step['index']} (x{step['factor']:g}, {step['offered']['requests_per_s']:.2f} req/s offered)"


def _slo_case(slo: dict, step: dict) -> GateCase:
    met = slo["verdict"] == "pass"
    upper = "no data" if slo["ci_high_ms"] is None else f"{slo['ci_high_ms']:.1f} ms"
    message = f"{slo['slo']} at {_where(step)}: upper bound {upper} vs {slo['threshold_ms']:g} ms"
    return GateCase(
        "slo", slo["slo"], PASSED if met else FAILED, slo["verdict"], message, candidate_ms=slo["value_ms"],
        ci_high=slo["ci_high_ms"], limit=slo["threshold_ms"],
    )  # fmt: skip


def _error_case(step: dict, document: dict) -> GateCase:
    errors = step["errors"]
    rate = errors["rate"]
    limit = (document.get("settings") or {}).get("max_error_rate")
    seen = "no request counted" if rate is None else f"{rate:.1%} of {errors['counted']:,}"
    over = errors["over_limit"]
    return GateCase(
        "errors", "error rate", FAILED if over else PASSED, "breach" if over else "pass",
        f"error rate at {_where(step)}: {seen}", value=rate, limit=limit,
    )  # fmt: skip


def _step_case(step: dict) -> GateCase:
    name = f"step {step['index']}: x{step['factor']:g} ({step['kind']})"
    reasons = "; ".join(step.get("fail_reasons") or [])
    offered = step["offered"]["requests_per_s"]
    if step["verdict"] in (CLIENT_BOUND, INTERRUPTED):
        return GateCase("steps", name, SKIPPED, step["verdict"], f"not measured: {reasons}")
    if step["verdict"] == PASS:
        message = f"held the SLOs at {offered:.2f} req/s offered"
    else:
        message = f"beyond the capacity at {offered:.2f} req/s offered: {reasons}"
    return GateCase("steps", name, PASSED, step["verdict"], message, value=offered)
