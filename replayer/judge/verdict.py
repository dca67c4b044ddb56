"""The gate's verdict, one definition for `replay`, `report` and `compare`: what failed, in a reader's
order (fidelity, SLOs, errors, latency), and a one-line headline that says it first. `compare` says
GO / NO-GO, `replay` and `report` PASS / FAIL; exit status 1 whenever anything failed."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

import replayer.judge.slo as judge_slo
import replayer.judge.stats as judge_stats
from llmreplay.metrics import BY_NAME, GATING
from replayer.judge.run_fidelity import FAIL, LOAD_CHECK

SHARE_MOVED = 0.05  # of the output tokens: a smaller change of the reasoning share is not reported
SPREAD_FOR_APPROX = 1.10  # ratios within 10% of each other read as one "≈" number


def verdict(
    mode: str,
    fidelity_checks: list[dict],
    gate_checks: list[dict],
    slos: list[dict],
    sides: dict,
    latency: dict | None = None,
    error_comparison: dict | None = None,
    tolerance: float = 0.10,
    fail_on_inconclusive: bool = False,
    has_run: bool = True,
) -> dict:
    """`mode`: compare, report or replay; `gate_checks`: the error-rate checks (replayer.judge.error_gate);
    `latency`: replayer.compare.latency rows (compare only); `has_run`: some side is a replay run."""
    found = _Findings()
    unfaithful, refused = _fidelity(found, fidelity_checks, mode)
    if latency is not None and not refused:
        phrase, latency_reasons, latency_rows = _latency(latency, tolerance, fail_on_inconclusive)
        found.parts += phrase
        found.reasons += latency_reasons
        found.rows += latency_rows
    moved = share_moved(sides) if mode == "compare" else None
    if moved:  # why TTFO moved, when it did: reported, never a failure by itself
        found.rows.append(_row("reasoning share", "output", "moved", moved))
        found.parts.append(moved)
    found.parts += _slos(slos, mode, found.reasons, found.rows)
    _errors(found, gate_checks, mode)
    if error_comparison:
        _error_change(found, error_comparison, fail_on_inconclusive)
    for label, side in sides.items():
        if side["successful"] == 0:
            found.fail(f"{label}: no successful request ({side['requests']:,} sent or planned)")
    return _outcome(found, mode, has_run and not unfaithful)


@dataclass
class _Findings:
    """What the verdict gathers, in the reader's order: failure reasons, table rows, headline parts, and
    what a healthy single run says of itself."""

    reasons: list[str] = field(default_factory=list)
    rows: list[dict] = field(default_factory=list)
    parts: list[str] = field(default_factory=list)
    healthy: list[str] = field(default_factory=list)

    def fail(self, text: str) -> None:
        self.reasons.append(text)
        self.parts.append(text)


def _fidelity(found: _Findings, checks: list[dict], mode: str) -> tuple[list[dict], list[dict]]:
    """The failed fidelity checks: (unfaithful ones, the refused same-load one); rows and reasons of both."""
    unfaithful = [c for c in checks if c["status"] == FAIL and c["check"] != LOAD_CHECK]
    refused = [c for c in checks if c["status"] == FAIL and c["check"] == LOAD_CHECK]
    for check in unfaithful:
        found.rows.append(_row(check["check"], "fidelity", "unfaithful", check["detail"]))
        found.reasons.append(f"unfaithful replay: {_named(check, mode)}")
    if unfaithful:
        found.parts.append("replay not faithful: " + "; ".join(_named(c, mode) for c in unfaithful))
    for check in refused:
        found.rows.append(_row(check["check"], "fidelity", judge_stats.DIFFERENT_LOAD, check["detail"]))
        found.reasons.append(
            f"latency not compared: {check['summary']}; pass --allow-different-load to compare anyway"
        )
        found.parts.append(f"latency not compared: {check['summary']} (--allow-different-load)")
    return unfaithful, refused


def _errors(found: _Findings, gate_checks: list[dict], mode: str) -> None:
    """The error-rate checks: a breach fails; one run that passed says its rate."""
    for check in gate_checks:
        found.rows.append(
            _row(check["check"], "errors", "breach" if check["status"] == FAIL else "pass", check["detail"])
        )
        if check["status"] == FAIL:
            found.fail(check["summary"])
        elif mode != "compare" and check["value"] is not None:  # one run: say how it went, if all is well
            found.healthy.append(f"error rate {check['value']:.1%} ≤ {check['limit']:.0%}")


def _error_change(found: _Findings, comparison: dict, fail_on_inconclusive: bool) -> None:
    """The candidate's error-rate change: a significant rise fails, an inconclusive one only when strict."""
    found.rows.append(_row("error rate change", "errors", comparison["verdict"], _change(comparison)))
    if comparison["verdict"] == judge_stats.REGRESSION:
        found.fail(f"error rate up {_change(comparison)}")
    elif fail_on_inconclusive and comparison["verdict"] == judge_stats.INCONCLUSIVE:
        found.fail(f"error-rate change inconclusive, {_change(comparison)} (--fail-on-inconclusive)")


def _outcome(found: _Findings, mode: str, faithful_run: bool) -> dict:
    """The verdict dict: failed when any reason was found; the headline says it first."""
    failed = bool(found.reasons)
    parts = found.parts + ([] if failed else found.healthy) + (["replay faithful"] if faithful_run else [])
    word = ("NO-GO" if failed else "GO") if mode == "compare" else ("FAIL" if failed else "PASS")
    return {
        "status": "fail" if failed else "pass",
        "exit_code": 1 if failed else 0,
        "headline": f"{word}: " + ("; ".join(parts) if parts else "nothing to judge"),
        "reasons": found.reasons,
        "rows": found.rows,
    }


def _named(check: dict, mode: str) -> str:
    """A failed check's phrase; in a comparison, with the side it is about ("candidate: interrupted …")."""
    side = check.get("side")
    return f"{side}: {check['summary']}" if mode == "compare" and side else check["summary"]


def _row(item: str, kind: str, verdict_: str, detail: str) -> dict:
    return {"item": item, "kind": kind, "verdict": verdict_, "detail": detail}


def _slos(slos: list[dict], mode: str, reasons: list, rows: list) -> list[str]:
    parts = []
    for slo in slos:
        value = "n/a" if slo["candidate_ms"] is None else f"{slo['candidate_ms']:.1f} ms"
        rows.append(_row(slo["slo"], "slo", slo["verdict"], f"{value} vs limit {slo['threshold_ms']:g} ms"))
        if slo["verdict"] != judge_slo.PASS:
            reasons.append(f"SLO {slo['slo']}: {slo['verdict']}")
            word = "breached" if slo["verdict"] == judge_slo.BREACH else "has no data"
            parts.append(f"SLO {slo['slo']} {word} ({value})")
    if slos and not parts:
        parts.append("SLOs still met" if mode == "compare" else "SLOs met")
    return parts


def _change(comparison: dict) -> str:
    d, low, high = comparison["difference"], comparison["ci_low"], comparison["ci_high"]
    if d is None:
        return "n/a"
    return f"{d * 100:+.1f} points (CI {low * 100:+.1f} to {high * 100:+.1f})"


def _latency(latency: dict, tolerance: float, strict: bool) -> tuple[list[str], list[str], list[dict]]:
    """(headline phrases, failing reasons, verdict rows) of the latency cells."""
    rows, reasons = [], []
    by_verdict: dict[str, dict[str, list]] = {}
    judged = 0
    for metric in (m.name for m in GATING):  # a metric that does not gate is shown, never judged
        for q in BY_NAME[metric].percentiles:
            cell = latency[metric]["comparison"][f"p{q}"]
            rows.append(_row(f"{metric} p{q}", "latency", cell["verdict"], ""))
            if cell["verdict"] != judge_stats.NO_DATA:
                judged += 1
            by_verdict.setdefault(cell["verdict"], {}).setdefault(metric, []).append((q, cell))
    regressions = by_verdict.get(judge_stats.REGRESSION, {})
    inconclusive = by_verdict.get(judge_stats.INCONCLUSIVE, {})
    for metric, cells in regressions.items():
        reasons.append(
            f"{metric} regressed at {_percentiles(cells)} ({_times([c['ratio'] for _, c in cells])}x)"
        )
    if strict:
        for metric, cells in inconclusive.items():
            reasons.append(f"{metric} inconclusive at {_percentiles(cells)} (--fail-on-inconclusive)")
    parts = []
    if regressions:
        parts += _grouped(regressions, "slower", invert=False)
    if by_verdict.get(judge_stats.IMPROVEMENT):
        parts += _grouped(by_verdict[judge_stats.IMPROVEMENT], "faster", invert=True)
    count = sum(len(cells) for cells in inconclusive.values())
    if count and strict:
        parts.append(f"{count} of {judged} latency cells inconclusive (--fail-on-inconclusive)")
    elif count and not regressions:
        parts.append(f"no latency regression, {count} of {judged} cells inconclusive")
    if not parts:
        parts.append(f"no latency change beyond ±{tolerance:.0%}" if judged else "no latency data")
    return parts, reasons, rows


def _inverse(value: float) -> float:
    return 1 / value if value else float("inf")


def _grouped(cells_by_metric: dict[str, list], direction: str, invert: bool) -> list[str]:
    """Metrics with the same percentiles in one phrase: 'TTFT ≈4.4× (CI …) and E2E ≈3.9× (CI …) slower at …'."""
    groups: dict[tuple, list[str]] = {}
    for metric in (m.name for m in GATING):
        cells = cells_by_metric.get(metric)
        if not cells:
            continue
        # A candidate percentile of 0 ns (ITL gaps of chunks read together) is infinitely faster.
        ratios = [_inverse(c["ratio"]) if invert else c["ratio"] for _, c in cells]
        lows = [_inverse(c["ci_high"]) if invert else c["ci_low"] for _, c in cells]
        # A CI reaching 0 (a side whose gaps are 0 ns: chunks read together) inverts to no upper bound.
        highs = [
            (1 / c["ci_low"] if c["ci_low"] else float("inf")) if invert else c["ci_high"] for _, c in cells
        ]
        text = f"{BY_NAME[metric].title} {_times(ratios)}× (CI {_number(min(lows))}–{_number(max(highs))})"
        every = len(cells) == len(BY_NAME[metric].percentiles)
        groups.setdefault((every, tuple(q for q, _ in cells)), []).append(text)
    phrases = []
    for (every, percentiles), texts in groups.items():
        where = "at every percentile" if every else "at " + ", ".join(f"p{q}" for q in percentiles)
        phrases.append(f"{' and '.join(texts)} {direction} {where}")
    return phrases


def _percentiles(cells: list) -> str:
    return ", ".join(f"p{q}" for q, _ in cells)


def _times(ratios: list[float]) -> str:
    low, high = min(ratios), max(ratios)
    if high <= low * SPREAD_FOR_APPROX:
        return "≈" + _number(statistics.median(ratios))
    return f"{_number(low)}–{_number(high)}"


def _number(value: float) -> str:
    return f"{value:.0f}" if value >= 10 else f"{value:.1f}" if value >= 2 else f"{value:.2f}"


def share_moved(sides: dict) -> str | None:
    """'reasoning share of output 17% -> 33%' when the two sides' shares differ by SHARE_MOVED or more:
    a staging engine that reasons longer answers later (TTFO) with the same output tokens. Reported,
    never a failure by itself."""
    baseline, candidate = (side.get("reasoning_share") for side in sides.values())
    if baseline is None or candidate is None or abs(candidate - baseline) < SHARE_MOVED:
        return None
    return f"reasoning share of output {baseline:.0%} -> {candidate:.0%}"
