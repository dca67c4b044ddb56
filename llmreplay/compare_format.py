"""The compare result format ("llmreplay.compare"): what `compare --json` and `report --json` print, its
version, the one reader, and the gate's cases (what JUnit and the verdict CSV list) derived from it.

A result is the dict replayer.compare.sides builds, with `format` and `format_version` first. Readers
take every minor of a major they know (keys a later minor added are absent in older results) and refuse
another major in one line. docs/compare-format.md describes every field; samples/golden/compare-v*.json
holds one result per version. Light: no numpy, no pyarrow (the core; replayer.compare imports it).
"""

from __future__ import annotations

import json
import math
from dataclasses import astuple, dataclass, fields
from pathlib import Path
from typing import Any

from llmreplay.errors import BadInput, first_line

# Version rule: MAJOR.MINOR. A minor only adds keys; a major renames, removes or changes the meaning of one.
FORMAT = "llmreplay.compare"
FORMAT_VERSION = "1.1"
READABLE_MAJOR_VERSIONS = (1,)

# Outcomes of a gate case, as JUnit knows them.
PASSED, FAILED, SKIPPED = "passed", "failed", "skipped"
# Values of the result (replayer.judge.run_fidelity, .stats, .slo), part of the format.
_CHECK_FAIL = "fail"
_REGRESSION, _INCONCLUSIVE = "regression", "inconclusive"
_NOT_JUDGED = {  # latency verdicts that neither pass nor fail: JUnit's skipped, with why
    "inconclusive": "inconclusive: the CI straddles a tolerance bound (not enough data to tell)",
    "no_data": "no data: no request measured it",
    "different_load": "not compared: the sides ran at different --speed/--scale",
}
_FEW_SAMPLES = "inconclusive: too few values beyond the percentile to call a change (a bootstrap cannot see past the largest)"


def stamped(result: dict) -> dict:
    """`result` with the format's name and version as its first keys."""
    rest = {k: v for k, v in result.items() if k not in ("format", "format_version")}
    return {"format": FORMAT, "format_version": FORMAT_VERSION, **rest}


def dumps(result: dict) -> str:
    """The result as `--json` prints it: stamped, indented, NaN and infinities as null."""
    return json.dumps(_finite(stamped(result)), indent=2, allow_nan=False, default=str)


def check_version(document: object, where: str) -> dict:
    """`document` if it is a compare result this llmreplay reads; BadInput in one line otherwise."""
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        found = document.get("format") if isinstance(document, dict) else None
        what = f"format {found!r}" if found else "no format name"
        raise BadInput(f"{where}: not a {FORMAT} result ({what}); write one with `llmreplay compare ... --json`")
    version = str(document.get("format_version", ""))
    major = version.split(".", 1)[0]
    if not major.isdigit() or "." not in version:
        raise BadInput(f"{where}: format_version {version!r} is not a version")
    if int(major) not in READABLE_MAJOR_VERSIONS:
        readable = ", ".join(f"{v}.x" for v in READABLE_MAJOR_VERSIONS)
        raise BadInput(
            f"{where}: {FORMAT} version {version} is not supported (this llmreplay reads {readable}); "
            "upgrade llmreplay"
        )
    if not isinstance(document.get("verdict"), dict):
        raise BadInput(f"{where}: {FORMAT} result without a verdict")
    return document


def read_compare_result(path: str | Path, where: str = "compare result") -> dict:
    """A `compare --json` (or `report --json`) file, version checked."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or type(exc).__name__
        raise BadInput(f"{where} {path}: cannot read ({reason})") from None
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise BadInput(f"{where} {path}: not JSON ({first_line(exc)})") from None
    return check_version(document, f"{where} {path}")


# --- the gate's cases --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GateCase:
    """One thing the gate judged: a fidelity check, a latency cell, an SLO, an error check, a side.

    Its fields are the verdict CSV's columns, in order; a JUnit test case each."""

    kind: str  # fidelity, latency, slo, errors, sides
    name: str  # "candidate: dispatch lag p99 (ms)", "ttft p95", "ttft_p95<=500ms", ...
    outcome: str  # PASSED, FAILED or SKIPPED
    verdict: str  # the result's own word: ok, fail, warn, info, regression, no_change, breach, ...
    message: str  # why it failed or was skipped (the failure message); what was seen otherwise
    baseline_ms: float | None = None
    candidate_ms: float | None = None
    ratio: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    value: float | None = None
    limit: float | None = None

    def row(self) -> tuple:
        return astuple(self)


CASE_COLUMNS = tuple(f.name for f in fields(GateCase))


def gate_cases(result: dict) -> list[GateCase]:
    """Every case the verdict of `result` (a compare or report result) judged, in the verdict's order:
    fidelity, latency (compare only), SLOs, errors, sides. A case fails exactly when it is among the
    verdict's reasons, so some case fails exactly when the exit status is 1."""
    strict = bool(result.get("fail_on_inconclusive", False))
    cases = [_check_case("fidelity", check) for check in (result.get("fidelity") or {}).get("checks", [])]
    if result.get("mode") == "compare":
        cases += _latency_cases(result, strict)
    cases += [_slo_case(slo) for slo in result.get("slos") or []]
    errors = result.get("errors") or {}
    if errors.get("gate"):
        cases.append(_check_case("errors", errors["gate"]))
    if errors.get("comparison"):
        cases.append(_error_change_case(errors["comparison"], strict))
    for label, side in (result.get("sides") or {}).items():
        ok = side.get("successful", 0) > 0
        text = f"{side.get('successful', 0):,} of {side.get('requests', 0):,} requests successful"
        cases.append(
            GateCase(
                "sides",
                f"{label}: successful requests",
                PASSED if ok else FAILED,
                "ok" if ok else "fail",
                text if ok else f"{label}: no successful request ({side.get('requests', 0):,} sent or planned)",
                value=side.get("successful"),
            )
        )
    return cases


def _check_case(kind: str, check: dict) -> GateCase:
    failed = check.get("status") == _CHECK_FAIL
    name = check["check"]
    if failed:
        side = check.get("side")
        summary = check.get("summary") or name
        message = f"{side}: {summary}" if side and not summary.startswith(f"{side}:") else summary
        detail = check.get("detail")
        if detail and detail not in message:
            message = f"{message} ({detail})"
    else:
        message = check.get("detail") or ""
    return GateCase(
        kind,
        name,
        FAILED if failed else PASSED,
        check.get("status", ""),
        message,
        value=_number(check.get("value")),
        limit=_number(check.get("limit")),
    )


def _latency_cases(result: dict, strict: bool) -> list[GateCase]:
    """The latency cells the verdict judged (its rows of kind latency: the metrics that gate), each with
    its numbers from the latency section."""
    cases = []
    tolerance = result.get("tolerance") or 0.0
    latency = result.get("latency") or {}
    for row in (result.get("verdict") or {}).get("rows", []):
        if row.get("kind") != "latency":
            continue
        metric, p = row["item"].rsplit(" ", 1)
        table = latency.get(metric) or {}
        cell = (table.get("comparison") or {}).get(p) or {}
        verdict = cell.get("verdict", row.get("verdict", ""))
        base = _number((table.get("baseline") or {}).get(f"{p}_ms"))
        cand = _number((table.get("candidate") or {}).get(f"{p}_ms"))
        ratio, low, high = (_number(cell.get(k)) for k in ("ratio", "ci_low", "ci_high"))
        seen = _cell_text(base, cand, ratio, low, high)
        if verdict == _REGRESSION:
            outcome = FAILED
            message = f"{metric} {p} regressed: {seen}; over the ±{tolerance:.0%} tolerance, CI above 1"
        elif verdict == _INCONCLUSIVE and strict:
            outcome = FAILED
            message = f"{metric} {p} inconclusive (--fail-on-inconclusive): {seen}"
        elif verdict == _INCONCLUSIVE and cell.get("few_samples"):
            outcome = SKIPPED
            message = f"{metric} {p} {_FEW_SAMPLES}: {seen}"
        elif verdict in _NOT_JUDGED:
            outcome = SKIPPED
            message = f"{metric} {p} {_NOT_JUDGED[verdict]}" + (f": {seen}" if ratio is not None else "")
        else:
            outcome = PASSED
            message = f"{metric} {p} {verdict.replace('_', ' ')}: {seen}"
        cases.append(GateCase("latency", f"{metric} {p}", outcome, verdict, message, base, cand, ratio, low, high))
    return cases


def _slo_case(slo: dict) -> GateCase:
    value = _number(slo.get("candidate_ms"))
    seen = "n/a" if value is None else f"{value:.1f} ms"
    verdict = slo.get("verdict", "")
    passed = verdict == "pass"
    word = {"breach": "breached", "no_data": "has no data"}.get(verdict, verdict)
    message = f"{seen} vs limit {slo.get('threshold_ms'):g} ms"
    return GateCase(
        "slo",
        slo["slo"],
        PASSED if passed else FAILED,
        verdict,
        message if passed else f"SLO {slo['slo']} {word}: {message}",
        _number(slo.get("baseline_ms")),
        value,
        limit=_number(slo.get("threshold_ms")),
    )


def _error_change_case(comparison: dict, strict: bool) -> GateCase:
    verdict = comparison.get("verdict", "")
    d, low, high = (_number(comparison.get(k)) for k in ("difference", "ci_low", "ci_high"))
    change = "n/a" if None in (d, low, high) else f"{d * 100:+.1f} points (CI {low * 100:+.1f} to {high * 100:+.1f})"
    if verdict == _REGRESSION:
        outcome, message = FAILED, f"error rate up {change}"
    elif verdict == _INCONCLUSIVE:
        outcome = FAILED if strict else SKIPPED
        message = f"error-rate change inconclusive, {change}" + (" (--fail-on-inconclusive)" if strict else "")
    else:
        outcome, message = PASSED, f"{verdict.replace('_', ' ')}: {change}"
    return GateCase("errors", "error rate change", outcome, verdict, message, value=d, ci_low=low, ci_high=high)


def _cell_text(base, cand, ratio, low, high) -> str:
    parts = []
    if base is not None and cand is not None:
        parts.append(f"{base:.1f} -> {cand:.1f} ms")
    if ratio is not None:
        ci = f" (CI {low:.2f}-{high:.2f})" if low is not None and high is not None else ""
        parts.append(f"{ratio:.2f}x{ci}")
    return ", ".join(parts) or "no data"


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _finite(value):
    """NaN and infinities become null: JSON has no spelling for them."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value
