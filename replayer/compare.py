"""Comparison of two sides (trace or run) — or the summary of one: a JSON-ready dict with verdicts.

Pure logic over loaded tables (replayer.compare_inputs does the I/O); the reports only render it.
Latency percentiles carry bootstrap CIs; exit status: 0 nothing regressed, 1 regression, SLO
breach or unfaithful replay.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow.compute as pc

from llmreplay.errors import BadInput
from llmreplay.metrics import LATENCY_METRICS, PERCENTILES
from replayer import compare_fidelity, compare_load, compare_slo, compare_stats
from replayer.compare_inputs import RUN, TRACE, Side, shift_latencies
from replayer.compare_requests import CLIENT_SIDE_ERRORS, Requests, build_requests, own_duration_s, time_scale

INPUT_TOKEN_EDGES = (512, 2048, 8192)
INPUT_TOKEN_LABELS = ("<512", "512-2k", "2k-8k", ">8k")
MAX_MODEL_BUCKETS = 8
CDF_POINTS = 201
PAIRED_RATIO_PERCENTILES = (1, 10, 50, 90, 99)
CLOCK_DOMAIN_NOTES = {
    "gateway": "timed at the gateway (recorder): from the request's arrival at the gateway",
    "client": "timed at the replay client: from the actual send on the client's monotonic clock",
}
METRIC_DEFINITIONS = {
    "ttft": "request start -> first chunk carrying content or a tool-call delta (streamed requests only)",
    "itl": "gap between consecutive content chunks of a streamed request (all gaps pooled)",
    "tpot": "(E2E - TTFT) / (output tokens - 1), streamed requests with at least 2 output tokens",
    "e2e": "request start -> last byte of the response",
}


@dataclass(frozen=True, slots=True)
class CompareConfig:
    """Everything that shapes a comparison; the CLI fills it, defaults live here only."""

    tolerance: float = 0.10  # relative change a latency percentile may move before it counts
    error_rate_tolerance: float = 0.01  # absolute change of the error share
    slos: tuple[compare_slo.Slo, ...] = ()
    offset_ttft_ns: int = 0  # subtracted from the candidate's TTFT and E2E (network difference)
    limits: compare_fidelity.FidelityLimits = field(default_factory=compare_fidelity.FidelityLimits)
    confidence: float = compare_stats.CONFIDENCE  # family-wise, over the metric x percentile verdicts
    seed: int = compare_stats.BOOTSTRAP_SEED
    draws: int = compare_stats.BOOTSTRAP_DRAWS

    @property
    def interval_confidence(self) -> float:
        return compare_stats.per_interval_confidence(self.confidence, len(LATENCY_METRICS) * len(PERCENTILES))


def compare_sides(baseline: Side, candidate: Side, config: CompareConfig) -> dict:
    """The full comparison of candidate against baseline, restricted to the requests both contain."""
    candidate = shift_latencies(candidate, config.offset_ttft_ns)
    baseline, candidate, common = _restrict_to_common(baseline, candidate)
    rng = compare_stats.make_rng(config.seed)
    b_req, c_req = build_requests(baseline), build_requests(candidate)
    b_scale, c_scale = time_scale(baseline, b_req), time_scale(candidate, c_req)
    common_b, common_c = _paired_indices(b_req, c_req)
    sides = [(baseline, b_req, b_scale), (candidate, c_req, c_scale)]
    latency = _latency_section(baseline, b_req, candidate, c_req, config, rng)
    errors = _errors_section(b_req, c_req, config, rng)
    fidelity = _fidelity_section(baseline, b_req, candidate, c_req, common_b, common_c, c_scale, config)
    slos = _slo_section(baseline, b_req, candidate, c_req, config)
    result = {
        "mode": "compare",
        "tolerance": config.tolerance,
        "error_rate_tolerance": config.error_rate_tolerance,
        "confidence": config.confidence,
        "interval_confidence": config.interval_confidence,
        "common_requests": common,
        "sides": {s.label: _side_summary(s, r, scale) for s, r, scale in sides},
        "clock_domains": _clock_domains(baseline, candidate, config),
        "fidelity": fidelity,
        "latency": latency,
        "slos": slos,
        "goodput": {s.label: _goodput(r, config) for s, r, _ in sides},
        "errors": errors,
        "buckets": _buckets_section(baseline, b_req, candidate, c_req, config, rng),
        "paired": _paired_section(b_req, c_req, common_b, common_c, config),
        "load": _load_section(sides),
        "cdf": {s.label: _cdf_points(s, r) for s, r, _ in sides},
        "metric_definitions": METRIC_DEFINITIONS,
    }
    result["verdict"] = _overall_verdict(result)
    return result


def summarize_side(side: Side, config: CompareConfig) -> dict:
    """The report of one run (or trace) without a baseline: same sections, no latency verdicts."""
    req = build_requests(side)
    scale = time_scale(side, req)
    rng = compare_stats.make_rng(config.seed)
    fidelity = compare_fidelity.run_checks(side.label, req, config.limits) if side.kind == RUN else []
    result = {
        "mode": "report",
        "tolerance": config.tolerance,
        "sides": {side.label: _side_summary(side, req, scale)},
        "clock_domains": {side.label: CLOCK_DOMAIN_NOTES.get(side.clock_domain, side.clock_domain)},
        "fidelity": {
            "checks": fidelity,
            "unfaithful": any(c["status"] == compare_fidelity.FAIL for c in fidelity),
        },
        "latency": _latency_section(None, None, side, req, config, rng),
        "slos": _slo_section(None, None, side, req, config),
        "goodput": {side.label: _goodput(req, config)},
        "errors": _errors_section(None, req, config, rng, side.label),
        "buckets": _buckets_section(None, None, side, req, config, rng),
        "paired": None,
        "load": _load_section([(side, req, scale)]),
        "cdf": {side.label: _cdf_points(side, req)},
        "metric_definitions": METRIC_DEFINITIONS,
    }
    result["verdict"] = _overall_verdict(result)
    return result


# --- joining -------------------------------------------------------------------------------------


def _restrict_to_common(baseline: Side, candidate: Side) -> tuple[Side, Side, dict]:
    b_keys = baseline.table.column(baseline.join_key)
    c_keys = candidate.table.column(candidate.join_key)
    common = pc.unique(b_keys.filter(pc.is_in(b_keys, value_set=pc.unique(c_keys))))
    if len(common) == 0:
        raise BadInput(
            f"{baseline.path} and {candidate.path}: no request id in common "
            f"(baseline ids like {b_keys[0].as_py()!r}, candidate like {c_keys[0].as_py()!r}); "
            "compare a replay with the trace it replayed, or two replays of the same trace"
        )
    b_unique, c_unique = len(pc.unique(b_keys)), len(pc.unique(c_keys))
    info = {
        "common": len(common),
        "baseline_only": b_unique - len(common),
        "candidate_only": c_unique - len(common),
    }
    return (
        _filter(baseline, pc.is_in(b_keys, value_set=common)),
        _filter(candidate, pc.is_in(c_keys, value_set=common)),
        info,
    )


def _filter(side: Side, mask) -> Side:
    return Side(side.label, side.path, side.kind, side.table.filter(mask), side.config, side.clock_domain)


def _paired_indices(b: Requests, c: Requests) -> tuple[np.ndarray, np.ndarray]:
    """Row indices of the originals present on both sides, matched by key."""
    b_pos = {key: i for i, key in enumerate(b.key) if b.original[i]}
    pairs = [(b_pos[key], j) for j, key in enumerate(c.key) if c.original[j] and key in b_pos]
    if not pairs:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    idx = np.array(pairs, dtype=np.int64)
    return idx[:, 0], idx[:, 1]


# --- latency ---------------------------------------------------------------------------------------


def _metric_values(req: Requests, mask: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Sorted finite values (ns) of every metric, for the rows in `mask`."""
    mask = np.ones(len(req), dtype=bool) if mask is None else mask
    values = {name: req.latency_ns[name][mask] for name in ("ttft", "tpot", "e2e")}
    values["itl"] = req.itl_gaps_ns[mask[req.itl_owner]]
    return {name: np.sort(v[np.isfinite(v)]) for name, v in values.items()}


def _itl_clusters(req: Requests, mask: np.ndarray | None = None) -> int:
    """Requests behind the pooled ITL gaps: the effective sample size of correlated gaps."""
    mask = np.ones(len(req), dtype=bool) if mask is None else mask
    return int((req.success & req.stream & mask).sum())


def _distribution(values_sorted: np.ndarray) -> dict:
    out: dict = {"count": int(values_sorted.size)}
    for q in PERCENTILES:
        out[f"p{q}_ms"] = _quantile_ms(values_sorted, q)
    return out


def _quantile_ms(values_sorted: np.ndarray, q: float) -> float | None:
    value = compare_stats.sorted_quantile(values_sorted, q / 100)
    return None if value is None else value / 1e6


def _latency_rows(
    b_values: dict | None,
    c_values: dict,
    b_clusters: int,
    c_clusters: int,
    config: CompareConfig,
    rng,
    c_label: str = "candidate",
) -> dict:
    rows = {}
    for name in LATENCY_METRICS:
        row = {c_label: _distribution(c_values[name])}
        if b_values is not None:
            row["baseline"] = _distribution(b_values[name])
            row["comparison"] = {}
            for q in PERCENTILES:
                estimate = compare_stats.quantile_ratio(
                    b_values[name],
                    c_values[name],
                    q / 100,
                    rng,
                    baseline_n_eff=b_clusters if name == "itl" else None,
                    candidate_n_eff=c_clusters if name == "itl" else None,
                    draws=config.draws,
                    confidence=config.interval_confidence,
                )
                row["comparison"][f"p{q}"] = {
                    "ratio": estimate.ratio,
                    "ci_low": estimate.ci_low,
                    "ci_high": estimate.ci_high,
                    "verdict": compare_stats.latency_verdict(estimate, config.tolerance),
                }
        rows[name] = row
    return rows


def _latency_section(baseline, b_req, candidate, c_req, config, rng) -> dict:
    b_values = _metric_values(b_req) if baseline is not None else None
    b_clusters = _itl_clusters(b_req) if b_req is not None else 0
    return _latency_rows(
        b_values,
        _metric_values(c_req),
        b_clusters,
        _itl_clusters(c_req),
        config,
        rng,
        candidate.label,
    )


def _cdf_points(side: Side, req: Requests) -> dict:
    """Each metric's quantile function at CDF_POINTS evenly spaced levels (ms), for the charts."""
    levels = np.linspace(0, 100, CDF_POINTS)
    out = {}
    for name, values in _metric_values(req).items():
        out[name] = (np.percentile(values, levels) / 1e6).tolist() if values.size else []
    return out


# --- buckets ---------------------------------------------------------------------------------------


def _bucket_labels(req: Requests) -> dict[str, np.ndarray]:
    tokens = req.shape_prompt_tokens
    index = np.searchsorted(np.array(INPUT_TOKEN_EDGES), np.nan_to_num(tokens, nan=-1), side="right")
    input_labels = np.array(INPUT_TOKEN_LABELS, dtype=object)[index]
    input_labels[~np.isfinite(tokens)] = "unknown"
    return {
        "input_tokens": input_labels,
        "stream": np.where(req.stream, "stream", "non-stream").astype(object),
        "tools": np.where(req.tools, "with tools", "without tools").astype(object),
        "model": req.model,
    }


def _bucket_order(dimension: str, labels: list[np.ndarray]) -> list[str]:
    present = set().union(*(set(lab.tolist()) for lab in labels))
    if dimension == "input_tokens":
        return [b for b in (*INPUT_TOKEN_LABELS, "unknown") if b in present]
    if dimension == "model":
        counts: dict[str, int] = {}
        for lab in labels:
            for value in lab.tolist():
                counts[value] = counts.get(value, 0) + 1
        return sorted(counts, key=lambda k: -counts[k])[:MAX_MODEL_BUCKETS]
    return sorted(present)


def _buckets_section(baseline, b_req, candidate, c_req, config, rng) -> list[dict]:
    c_labels = _bucket_labels(c_req)
    b_labels = _bucket_labels(b_req) if b_req is not None else None
    rows = []
    for dimension, c_lab in c_labels.items():
        sources = [c_lab] if b_labels is None else [b_labels[dimension], c_lab]
        buckets = _bucket_order(dimension, sources)
        if len(buckets) < 2:
            continue  # one bucket is the whole run, already shown
        for bucket in buckets:
            c_mask = c_lab == bucket
            b_mask = None if b_labels is None else b_labels[dimension] == bucket
            b_values = None if b_mask is None else _metric_values(b_req, b_mask)
            metrics = _latency_rows(
                b_values,
                _metric_values(c_req, c_mask),
                0 if b_mask is None else _itl_clusters(b_req, b_mask),
                _itl_clusters(c_req, c_mask),
                config,
                rng,
                candidate.label,
            )
            rows.append(
                {
                    "dimension": dimension,
                    "bucket": bucket,
                    "baseline_requests": None if b_mask is None else int(b_mask.sum()),
                    "candidate_requests": int(c_mask.sum()),
                    "metrics": metrics,
                }
            )
    return rows


# --- paired view -----------------------------------------------------------------------------------


def _paired_section(b: Requests, c: Requests, common_b, common_c, config: CompareConfig) -> dict:
    """Per-request candidate/baseline ratios: does every request slow down, or only the tail?"""
    out = {"pairs": int(common_b.size), "metrics": {}}
    for name in ("ttft", "tpot", "e2e"):
        b_vals, c_vals = b.latency_ns[name][common_b], c.latency_ns[name][common_c]
        ok = np.isfinite(b_vals) & np.isfinite(c_vals) & (b_vals > 0)
        ratios = np.sort(c_vals[ok] / b_vals[ok])
        if ratios.size == 0:
            out["metrics"][name] = {"count": 0}
            continue
        out["metrics"][name] = {
            "count": int(ratios.size),
            **{f"p{q}": float(np.percentile(ratios, q)) for q in PAIRED_RATIO_PERCENTILES},
            "share_slower": float((ratios > 1 + config.tolerance).mean()),
            "share_faster": float((ratios < 1 - config.tolerance).mean()),
            "quantiles": np.percentile(ratios, np.linspace(0, 100, 101)).tolist(),
        }
    return out


# --- errors, goodput, SLOs -------------------------------------------------------------------------


def _error_counts(req: Requests) -> dict:
    kinds: dict[str, int] = {}
    for kind in req.error_kind:
        if kind is not None:
            kinds[kind] = kinds.get(kind, 0) + 1
    engine_errors = int((req.counted & ~req.success).sum())
    return {
        "requests": len(req),
        "counted": int(req.counted.sum()),
        "engine_errors": engine_errors,
        "error_rate": engine_errors / int(req.counted.sum()) if req.counted.any() else None,
        "by_kind": dict(sorted(kinds.items(), key=lambda kv: -kv[1])),
        "client_side_kinds": sorted(CLIENT_SIDE_ERRORS & set(kinds)),
    }


def _errors_section(
    b_req: Requests | None, c_req: Requests, config: CompareConfig, rng, c_label: str = "candidate"
) -> dict:
    out = {c_label: _error_counts(c_req)}
    if b_req is not None:
        out["baseline"] = _error_counts(b_req)
        b, c = out["baseline"], out["candidate"]
        estimate = compare_stats.proportion_difference(
            b["engine_errors"], b["counted"], c["engine_errors"], c["counted"], rng
        )
        out["comparison"] = {
            "difference": estimate.difference,
            "ci_low": estimate.ci_low,
            "ci_high": estimate.ci_high,
            "verdict": compare_stats.rate_verdict(estimate, config.error_rate_tolerance),
        }
    return out


def _goodput(req: Requests, config: CompareConfig) -> dict | None:
    if not config.slos:
        return None
    meets = compare_slo.meets_slos(req.success, req.latency_ns, list(config.slos))
    return compare_slo.goodput(meets, req.counted, own_duration_s(req))


def _slo_section(baseline, b_req, candidate, c_req, config: CompareConfig) -> list[dict]:
    if not config.slos:
        return []
    c_values = _metric_values(c_req)
    b_values = _metric_values(b_req) if baseline is not None else None
    return [
        compare_slo.slo_verdict(slo, c_values[slo.metric], None if b_values is None else b_values[slo.metric])
        for slo in config.slos
    ]


# --- fidelity, load, sides -------------------------------------------------------------------------


def _fidelity_section(baseline, b_req, candidate, c_req, common_b, common_c, c_scale, config) -> dict:
    checks = []
    for side, req in ((baseline, b_req), (candidate, c_req)):
        if side.kind == RUN:
            checks += compare_fidelity.run_checks(side.label, req, config.limits)
    checks += compare_fidelity.cross_checks(
        b_req, c_req, common_b, common_c, c_scale, baseline.kind == TRACE, config.limits
    )
    return {"checks": checks, "unfaithful": any(c["status"] == compare_fidelity.FAIL for c in checks)}


def _load_section(sides: list[tuple[Side, Requests, float]]) -> dict:
    span = max(compare_load.trace_span_s(req, scale) for _, req, scale in sides)
    width = compare_load.window_width_s(max(span, 1e-3))
    count = max(1, int(np.ceil(span / width)))
    return {
        "window_trace_s": width,
        "windows": count,
        "series": {s.label: compare_load.load_windows(req, scale, width, count) for s, req, scale in sides},
    }


def _side_summary(side: Side, req: Requests, scale: float) -> dict:
    duration_s = own_duration_s(req)
    done = req.success
    output_tokens = float(np.nansum(req.completion_tokens[done]))
    return {
        "label": side.label,
        "path": str(side.path),
        "kind": side.kind,
        "clock_domain": side.clock_domain,
        "requests": len(req),
        "copies": int((~req.original).sum()),
        "sent": int(req.sent.sum()),
        "successful": int(done.sum()),
        "duration_s": duration_s,
        "time_scale": scale,
        "requests_per_s": len(req) / duration_s if duration_s > 0 else None,
        "output_tokens_per_s": output_tokens / duration_s if duration_s > 0 else None,
        "config": side.config,
    }


def _clock_domains(baseline: Side, candidate: Side, config: CompareConfig) -> dict:
    out = {s.label: CLOCK_DOMAIN_NOTES.get(s.clock_domain, s.clock_domain) for s in (baseline, candidate)}
    out["offset_ttft_ms"] = config.offset_ttft_ns / 1e6
    if baseline.clock_domain != candidate.clock_domain:
        out["note"] = (
            "the sides were timed in different places: the difference includes the network between "
            "the gateway and the replay client; --offset-ttft subtracts a measured difference from the candidate"
        )
    return out


# --- the verdict ------------------------------------------------------------------------------------


def _overall_verdict(result: dict) -> dict:
    """Verdict rows in the order a reader needs them: fidelity, SLOs, errors, then latency."""
    rows, reasons = [], []
    for check in result["fidelity"]["checks"]:
        if check["status"] == compare_fidelity.FAIL:
            rows.append(
                {
                    "item": check["check"],
                    "kind": "fidelity",
                    "verdict": "unfaithful",
                    "detail": check["detail"],
                }
            )
            reasons.append(f"unfaithful replay: {check['check']}")
    for slo in result["slos"]:
        rows.append(
            {"item": slo["slo"], "kind": "slo", "verdict": slo["verdict"], "detail": _slo_detail(slo)}
        )
        if slo["verdict"] != compare_slo.PASS:
            reasons.append(f"SLO {slo['slo']}: {slo['verdict']}")
    comparison = result["errors"].get("comparison")
    if comparison:
        rows.append({"item": "error rate", "kind": "errors", "verdict": comparison["verdict"], "detail": ""})
        if comparison["verdict"] == compare_stats.REGRESSION:
            reasons.append("error rate regressed")
    for metric, row in result["latency"].items():
        for percentile, cmp_row in (row.get("comparison") or {}).items():
            rows.append(
                {
                    "item": f"{metric} {percentile}",
                    "kind": "latency",
                    "verdict": cmp_row["verdict"],
                    "detail": "",
                }
            )
            if cmp_row["verdict"] == compare_stats.REGRESSION:
                reasons.append(f"{metric} {percentile} regressed ({cmp_row['ratio']:.2f}x)")
    for label, side in result["sides"].items():
        if side["successful"] == 0:
            reasons.append(f"{label}: no successful request ({side['requests']} sent or planned)")
    failed = bool(reasons)
    return {
        "status": "fail" if failed else "pass",
        "exit_code": 1 if failed else 0,
        "reasons": reasons,
        "rows": rows,
    }


def _slo_detail(slo: dict) -> str:
    value = "n/a" if slo["candidate_ms"] is None else f"{slo['candidate_ms']:.1f} ms"
    return f"{value} vs limit {slo['threshold_ms']:g} ms"
