"""SLOs: parsing `ttft_p95<=500ms`, the percentile verdict, and goodput (requests meeting every SLO).

Pure functions over numpy arrays in nanoseconds; bad syntax raises BadInput naming the flag.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from llmreplay.durations import parse_duration_ns
from llmreplay.errors import BadInput
from llmreplay.metrics import LATENCY_METRICS, METRICS

_SLO = re.compile(r"^\s*([a-z][a-z0-9]*)_p(\d+(?:\.\d+)?)\s*<=\s*(.+)$")
# A per-gap metric (ITL) gates the percentile verdict, but a request has no single value of it.
GOODPUT_METRICS = tuple(m.name for m in METRICS if not m.per_gap)

PASS = "pass"
BREACH = "breach"
NO_DATA = "no_data"


@dataclass(frozen=True, slots=True)
class Slo:
    metric: str  # one of llmreplay.metrics.LATENCY_METRICS
    percentile: float  # 0 < p < 100
    threshold_ns: int
    text: str  # as the user wrote it, for reports


def parse_slo(text: str) -> Slo:
    match = _SLO.match(text)
    example = "expected METRIC_pPCT<=DURATION, for example ttft_p95<=500ms"
    if not match:
        raise BadInput(f"--slo {text!r}: {example}")
    metric, percentile = match.group(1), float(match.group(2))
    if metric not in LATENCY_METRICS:
        raise BadInput(f"--slo {text!r}: unknown metric {metric!r} (one of {', '.join(LATENCY_METRICS)})")
    if not 0 < percentile < 100:
        raise BadInput(f"--slo {text!r}: percentile must be between 0 and 100")
    threshold_ns = parse_duration_ns(match.group(3), f"--slo {text!r}", bare_unit=None)
    return Slo(metric, percentile, threshold_ns, text.strip())


def slo_verdict(slo: Slo, candidate_values_ns: np.ndarray, baseline_values_ns: np.ndarray | None) -> dict:
    """Candidate's percentile against the threshold; the baseline's value is shown for context."""
    value = _percentile(candidate_values_ns, slo.percentile)
    baseline = None if baseline_values_ns is None else _percentile(baseline_values_ns, slo.percentile)
    if value is None:
        verdict = NO_DATA
    else:
        verdict = PASS if value <= slo.threshold_ns else BREACH
    return {
        "slo": slo.text,
        "metric": slo.metric,
        "percentile": slo.percentile,
        "threshold_ms": slo.threshold_ns / 1e6,
        "candidate_ms": None if value is None else value / 1e6,
        "baseline_ms": None if baseline is None else baseline / 1e6,
        "verdict": verdict,
    }


def _percentile(values: np.ndarray, percentile: float) -> float | None:
    finite = values[np.isfinite(values)]
    return float(np.percentile(finite, percentile)) if finite.size else None


def meets_slos(success: np.ndarray, per_request_ns: dict[str, np.ndarray], slos: list[Slo]) -> np.ndarray:
    """Per request: successful and within every per-request threshold.

    A metric a successful request does not have (TPOT of a one-token answer, TTFT of a non-streamed
    one) does not count against it.
    """
    ok = success.copy()
    for slo in slos:
        if slo.metric not in GOODPUT_METRICS:
            continue
        values = per_request_ns[slo.metric]
        ok &= (values <= slo.threshold_ns) | np.isnan(values)
    return ok


def goodput(meets: np.ndarray, counted: np.ndarray, duration_s: float) -> dict:
    """Share of the counted requests meeting every SLO, and their rate over the side's own duration."""
    total = int(counted.sum())
    good = int((meets & counted).sum())
    return {
        "requests": total,
        "good_requests": good,
        "share": good / total if total else None,
        "rate_per_s": good / duration_s if duration_s > 0 else None,
    }
