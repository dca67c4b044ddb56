"""Two sides (trace or run) compared, or one summarized, as a JSON-ready dict: pure over loaded tables.

Exit status: 0 nothing failed; 1 a regression, an SLO breach, too many errors, an unfaithful or
interrupted replay, or different loads (the verdict is replayer.judge.verdict's).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

import replayer.compare.drift as compare_drift
import replayer.compare.fidelity as compare_fidelity
import replayer.compare.load as compare_load
import replayer.compare.paired as compare_paired
import replayer.judge.slo as judge_slo
import replayer.judge.stats as judge_stats
from llmreplay.errors import BadInput
from llmreplay.metrics import GATING, METRICS
from llmreplay.run_format import stated_load
from replayer.compare.apis import api_section
from replayer.compare.buckets import buckets_section
from replayer.compare.config import CompareConfig
from replayer.compare.latency import latency_rows, sample_warnings
from replayer.compare.reasoning import reasoning_share
from replayer.judge import run_fidelity, time_blocks
from replayer.judge.error_gate import commonest_messages, engine_error_mask, error_counts, error_rate_check
from replayer.judge.trace_cache import run_trace_cache
from replayer.judge.verdict import verdict
from replayer.measured.cold_start import cold_start
from replayer.measured.requests import (
    RequestColumns,
    build_requests,
    own_duration_s,
    same_load,
    side_load,
    time_scale,
)
from replayer.measured.samples import Samples, samples
from replayer.measured.side import RUN, TRACE, Side, shift_latencies
from replayer.results.server_series import run_server_metrics

CDF_POINTS = 201
PAIRED_RATIO_PERCENTILES = (1, 10, 50, 90, 99)
CLOCK_DOMAIN_NOTES = {
    "gateway": "timed at the gateway (recorder): from the request's arrival at the gateway",
    "client": "timed at the replay client: from the actual send on the client's monotonic clock",
}
METRIC_DEFINITIONS = {m.name: m.definition for m in METRICS}


def compare_sides(baseline: Side, candidate: Side, config: CompareConfig) -> dict:
    """The full comparison of candidate against baseline, restricted to the requests both contain."""
    candidate = shift_latencies(candidate, config.offset_ttft_ns)
    # Each run as a whole; a run's cache against its trace's unless the other side is that trace (then
    # the cross check compares the two).
    run_checks = _run_checks(baseline, config, candidate.kind != TRACE) + _run_checks(
        candidate, config, baseline.kind != TRACE
    )
    phases = {
        "cold_start": _cold_starts([baseline, candidate]),
        "drift": _drifts([baseline, candidate], config),
    }
    baseline, candidate, common = _restrict_to_common(baseline, candidate)
    rng = judge_stats.make_rng(config.seed)
    b_req, c_req = build_requests(baseline), build_requests(candidate)
    apis = api_section(b_req.endpoint, c_req.endpoint, config.allow_different_api, candidate.label)
    b_scale, c_scale = time_scale(baseline, b_req), time_scale(candidate, c_req)
    b_load, c_load = side_load(baseline, b_req), side_load(candidate, c_req)
    matched = same_load(b_load, c_load)
    refused = not matched and not config.allow_different_load
    pairs = _pairing(baseline, candidate, b_req, c_req, config.cells(refused), config, rng)
    sides = [(baseline, b_req, b_scale), (candidate, c_req, c_scale)]
    latency = latency_rows(pairs.b_all, pairs.c_all, pairs.clusters, pairs.cells, rng, candidate.label, pairs.counts)
    errors = _errors_section(b_req, c_req, config, rng)
    checks = run_checks + compare_fidelity.cross_checks(
        b_req, c_req, pairs.common_b, pairs.common_c, c_scale, baseline.kind == TRACE, config.limits
    )
    checks.append(compare_fidelity.load_check(b_load, c_load, matched, config.allow_different_load))
    slos = _slo_section(pairs.b_all, pairs.c_all, config)
    side_rows = {s.label: _side_summary(s, r, scale) for s, r, scale in sides}
    result = {
        "mode": "compare",
        **_settings(config),
        "common_requests": common,
        "sides": side_rows,
        "like_with_like": {"baseline": b_load, "candidate": c_load, "same": matched, "refused": refused},
        "apis": apis,
        "clock_domains": _clock_domains(baseline, candidate, config),
        "fidelity": _fidelity(checks),
        "latency": latency,
        "dependence": pairs.dependence.as_dict(),
        "warnings": sample_warnings(latency, ["baseline", candidate.label]) + dependence_warnings(pairs.dependence),
        "slos": slos,
        "goodput": {s.label: _goodput(r, config) for s, r, _ in sides},
        "errors": errors,
        "buckets": buckets_section(
            b_req, pairs.b_clusters, c_req, pairs.c_clusters, pairs.clusters, pairs.cells, rng, candidate.label,
            pairs.counts,
        ),  # fmt: skip
        "paired": _paired_section(b_req, c_req, pairs.common_b, pairs.common_c, config),
        "cache": compare_fidelity.cache_section(b_req, c_req, config.limits),
        "load": _load_section(sides),
        "server_metrics": _server_metrics(sides),
        "cdf": {baseline.label: _cdf_points(pairs.b_all), candidate.label: _cdf_points(pairs.c_all)},
        "metric_definitions": METRIC_DEFINITIONS,
        **phases,
    }
    result["verdict"] = _compare_verdict(result, checks, config, has_run=RUN in (baseline.kind, candidate.kind))
    return result


def _settings(config: CompareConfig) -> dict:
    """The gate's settings a comparison states first."""
    return {
        "tolerance": config.tolerance,
        "fail_on_inconclusive": config.fail_on_inconclusive,
        "error_rate_tolerance": config.error_rate_tolerance,
        "max_error_rate": config.max_error_rate,
        "confidence": config.confidence,
        "interval_confidence": config.interval_confidence,
    }


@dataclasses.dataclass(frozen=True, slots=True)
class _Pairing:
    """How the two sides' requests pair up and what the bootstrap resamples: blocks of neighbours."""

    common_b: np.ndarray  # row indices of the originals on both sides, matched
    common_c: np.ndarray
    dependence: time_blocks.Dependence
    b_clusters: np.ndarray  # each row's block
    c_clusters: np.ndarray
    clusters: int
    cells: object  # compare.config.CellSettings with the block length
    counts: np.ndarray | None  # one set of resamples for every metric (small comparisons)
    b_all: Samples
    c_all: Samples


def _pairing(baseline, candidate, b_req, c_req, cells, config: CompareConfig, rng) -> _Pairing:
    common_b, common_c = _paired_indices(b_req, c_req)
    dependence = _dependence(b_req, c_req, common_b, common_c)
    b_clusters, c_clusters, clusters = _blocks(baseline, candidate, b_req, c_req, dependence)
    cells = dataclasses.replace(cells, block_requests=dependence.block_requests)
    counts = _shared_resamples(clusters, config, rng)
    return _Pairing(
        common_b, common_c, dependence, b_clusters, c_clusters, clusters, cells, counts,
        samples(b_req, b_clusters), samples(c_req, c_clusters),
    )  # fmt: skip


def _compare_verdict(result: dict, checks: list[dict], config: CompareConfig, has_run: bool) -> dict:
    return verdict(
        "compare",
        checks,
        [result["errors"]["gate"]],
        result["slos"],
        result["sides"],
        latency=result["latency"],
        error_comparison=result["errors"]["comparison"],
        tolerance=config.tolerance,
        fail_on_inconclusive=config.fail_on_inconclusive,
        has_run=has_run,
    )


def summarize_side(side: Side, config: CompareConfig) -> dict:
    """The report of one run (or trace) without a baseline: same sections, no latency verdicts."""
    req = build_requests(side)
    scale = time_scale(side, req)
    rng = judge_stats.make_rng(config.seed)
    clusters = np.arange(len(req))
    everything = samples(req, clusters)
    checks = _run_checks(side, config)
    errors = _errors_section(None, req, config, rng, side.label)
    slos = _slo_section(None, everything, config)
    side_rows = {side.label: _side_summary(side, req, scale)}
    latency = latency_rows(None, everything, len(req), config.cells(), rng, side.label)
    result = {
        "mode": "report",
        "tolerance": config.tolerance,
        "max_error_rate": config.max_error_rate,
        "sides": side_rows,
        "like_with_like": {side.label: side_load(side, req)},
        "clock_domains": {side.label: CLOCK_DOMAIN_NOTES.get(side.clock_domain, side.clock_domain)},
        "fidelity": _fidelity(checks),
        "latency": latency,
        "warnings": sample_warnings(latency, [side.label]),
        "slos": slos,
        "goodput": {side.label: _goodput(req, config)},
        "errors": errors,
        "buckets": buckets_section(None, None, req, clusters, len(req), config.cells(), rng, side.label),
        "paired": None,
        "cache": None,
        "load": _load_section([(side, req, scale)]),
        "server_metrics": _server_metrics([(side, req, scale)]),
        "cdf": {side.label: _cdf_points(everything)},
        "metric_definitions": METRIC_DEFINITIONS,
        "cold_start": _cold_starts([side]),
        "drift": _drifts([side], config),
    }
    result["verdict"] = verdict("report", checks, [errors["gate"]], slos, side_rows, has_run=side.kind == RUN)
    return result


# --- warm-up, cold start and soak drift (replayer.measured.cold_start, replayer.compare.drift) -----


def _cold_starts(sides: list[Side]) -> dict:
    return {s.label: cold_start(s) for s in sides if s.kind == RUN}


def _drifts(sides: list[Side], config: CompareConfig) -> dict:
    found = {s.label: soak_drift(s, config) for s in sides if s.kind == RUN}
    return {label: drift for label, drift in found.items() if drift is not None}


def soak_drift(side: Side, config: CompareConfig) -> dict | None:
    """A --soak run's last loop against its first, paired by source request like a compare (same
    bootstrap, tolerance and verdict rule), and its server series' trends; None: the run did not loop."""
    loops = np.asarray(side.table.column("loop").to_numpy(zero_copy_only=False))
    pair = compare_drift.soak_loops(loops)
    if pair is None:
        return None
    first_loop, last_loop = pair
    first = dataclasses.replace(
        side, label="first loop", table=side.table.filter(compare_drift.loop_mask(side.table, first_loop))
    )
    last = dataclasses.replace(
        side, label="last loop", table=side.table.filter(compare_drift.loop_mask(side.table, last_loop))
    )
    first, last, common = _restrict_to_common(first, last)
    b_req, c_req = build_requests(first), build_requests(last)
    dependence = _dependence(b_req, c_req, *_paired_indices(b_req, c_req))
    b_clusters, c_clusters, clusters = _blocks(first, last, b_req, c_req, dependence)
    cells = dataclasses.replace(config.cells(), block_requests=dependence.block_requests)
    rng = judge_stats.make_rng(config.seed)
    counts = _shared_resamples(clusters, config, rng)
    b_all, c_all = samples(b_req, b_clusters), samples(c_req, c_clusters)
    latency = latency_rows(b_all, c_all, clusters, cells, rng, last.label, counts)
    errors = _errors_section(b_req, c_req, config, rng, last.label)
    cells = compare_drift.drift_cells(latency, errors, last.label)
    trends = compare_drift.server_trends(side.path, side.run)
    return {
        "first_loop": first_loop,
        "last_loop": last_loop,
        "common_requests": common,
        "tolerance": config.tolerance,
        "cells": cells,
        "trends": trends,
        "findings": compare_drift.findings(cells, trends),
        "headline": compare_drift.drift_headline(cells),
    }


def _run_checks(side: Side, config: CompareConfig, cache_vs_trace: bool = True) -> list[dict]:
    """replayer.judge.run_fidelity's checks of a replay run, as `replay` itself made them (against
    the trace run.json names, when it is still there); none for a trace."""
    if side.kind != RUN:
        return []
    never_attempted, stop_reason = run_fidelity.completeness(side.run)
    facts = run_fidelity.run_facts(
        side.table, never_attempted, stop_reason, run_trace_cache(side.run), stated_load(side.run)
    )
    return run_fidelity.run_checks(side.label, facts, config.limits, cache_vs_trace)


def _fidelity(checks: list[dict]) -> dict:
    unfaithful = any(
        c["status"] == run_fidelity.FAIL and c["check"] != run_fidelity.LOAD_CHECK for c in checks
    )
    return {"checks": checks, "unfaithful": unfaithful}


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
    return dataclasses.replace(side, table=side.table.filter(mask))


def _paired_indices(b: RequestColumns, c: RequestColumns) -> tuple[np.ndarray, np.ndarray]:
    """Row indices of the originals present on both sides, matched by key."""
    b_pos = {key: i for i, key in enumerate(b.key) if b.original[i]}
    pairs = [(b_pos[key], j) for j, key in enumerate(c.key) if c.original[j] and key in b_pos]
    if not pairs:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    idx = np.array(pairs, dtype=np.int64)
    return idx[:, 0], idx[:, 1]


def _cluster_numbers(baseline: Side, candidate: Side) -> tuple[np.ndarray, np.ndarray, int]:
    """Each row's request number, shared by the two sides (the bootstrap resamples these: a request
    and its replay copies together, on both sides at once), and how many requests there are."""
    b_keys = baseline.table.column(baseline.join_key)
    c_keys = candidate.table.column(candidate.join_key)
    encoded = pa.chunked_array(b_keys.chunks + c_keys.chunks, type=pa.string()).dictionary_encode()
    numbers = np.asarray(pc.cast(encoded.combine_chunks().indices, pa.int64()).to_numpy(zero_copy_only=False))
    return (
        numbers[: len(b_keys)],
        numbers[len(b_keys) :],
        len(encoded.chunk(0).dictionary) if encoded.num_chunks else 0,
    )


def _dependence(
    b_req: RequestColumns, c_req: RequestColumns, common_b: np.ndarray, common_c: np.ndarray
) -> time_blocks.Dependence:
    """How strongly neighbouring requests' paired differences (log candidate / baseline of each gating
    per-request metric, in the trace's arrival order) move together."""
    order = np.argsort(b_req.trace_offset_ns[common_b], kind="stable")
    b_rows, c_rows = common_b[order], common_c[order]
    series = {}
    with np.errstate(divide="ignore", invalid="ignore"):
        for metric in GATING:
            if not metric.per_gap:
                name = metric.name
                series[name] = np.log(c_req.latency_ns[name][c_rows]) - np.log(b_req.latency_ns[name][b_rows])
    return time_blocks.dependence(series)


def _blocks(
    baseline: Side, candidate: Side, b_req: RequestColumns, c_req: RequestColumns, dependence
) -> tuple[np.ndarray, np.ndarray, int]:
    """Each row's block of consecutive requests (by first arrival in the trace), shared by both sides,
    and how many blocks there are: what the bootstrap resamples."""
    b_clusters, c_clusters, clusters = _cluster_numbers(baseline, candidate)
    if dependence.block_requests <= 1:
        return b_clusters, c_clusters, clusters
    arrival = np.full(clusters, np.inf)
    np.minimum.at(arrival, b_clusters, np.nan_to_num(b_req.trace_offset_ns.astype(float), nan=np.inf))
    np.minimum.at(arrival, c_clusters, np.nan_to_num(c_req.trace_offset_ns.astype(float), nan=np.inf))
    block, blocks = time_blocks.block_numbers(arrival, dependence.block_requests)
    return block[b_clusters], block[c_clusters], blocks


def dependence_warnings(dependence: time_blocks.Dependence) -> list[str]:
    """A line when neighbouring requests move together enough to resample them in blocks."""
    if dependence.block_requests <= 1:
        return []
    return [
        f"neighbouring requests move together ({dependence.metric} lag-1 autocorrelation "
        f"{dependence.lag1:.2f}): the confidence intervals resample blocks of {dependence.block_requests} "
        f"consecutive requests, about {dependence.effective_requests:.0f} independent of "
        f"{dependence.requests:,}"
    ]


def _shared_resamples(clusters: int, config: CompareConfig, rng) -> np.ndarray | None:
    """One set of pair resamples for every metric, when the comparison is small enough to resample literally."""
    if 0 < clusters <= compare_paired.EXACT_MAX_REQUESTS:
        return compare_paired.resample_counts(clusters, config.draws, rng)
    return None


# --- errors --------------------------------------------------------------------------------------


def _errors_section(
    b_req: RequestColumns | None,
    c_req: RequestColumns,
    config: CompareConfig,
    rng,
    c_label: str = "candidate",
) -> dict:
    """Counts by kind and the commonest messages of each side; the candidate's error rate against
    --max-error-rate, and its change from the baseline's (significant and over the tolerance fails)."""
    out = {c_label: _error_side(c_req), "comparison": None}
    out["gate"] = error_rate_check(c_label, out[c_label], config.max_error_rate)
    if b_req is not None:
        out["baseline"] = _error_side(b_req)
        b, c = out["baseline"], out[c_label]
        estimate = judge_stats.proportion_difference(
            b["engine_errors"], b["counted"], c["engine_errors"], c["counted"], rng
        )
        out["comparison"] = {
            "difference": estimate.difference,
            "ci_low": estimate.ci_low,
            "ci_high": estimate.ci_high,
            "verdict": judge_stats.rate_verdict(estimate, config.error_rate_tolerance),
        }
    return out


def _error_side(req: RequestColumns) -> dict:
    counts = error_counts(req.error_kind, req.sent, req.success)
    failed = engine_error_mask(req.error_kind, req.sent, req.success)
    counts["top_messages"] = commonest_messages(req.error_kind, req.http_status, req.error_detail, failed)
    return counts


# --- paired view, goodput, SLOs, load, sides -----------------------------------------------------


def _paired_section(b: RequestColumns, c: RequestColumns, common_b, common_c, config: CompareConfig) -> dict:
    """Per-request candidate/baseline ratios: does every request slow down, or only the tail? And the
    cached tokens of each pair: does the candidate's cache serve the same requests?"""
    out = {"pairs": int(common_b.size), "metrics": {}}
    for name in b.latency_ns:  # the per-request metrics: a gap (ITL) has no pair
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
    out["cached_tokens"] = compare_fidelity.cached_token_pairs(
        np.where(b.success[common_b], b.cached_tokens[common_b], np.nan),
        np.where(c.success[common_c], c.cached_tokens[common_c], np.nan),
    )
    return out


def _goodput(req: RequestColumns, config: CompareConfig) -> dict | None:
    if not config.slos:
        return None
    meets = judge_slo.meets_slos(req.success, req.latency_ns, list(config.slos))
    return judge_slo.goodput(meets, req.counted, own_duration_s(req))


def _slo_section(b: Samples | None, c: Samples, config: CompareConfig) -> list[dict]:
    return [
        judge_slo.slo_verdict(slo, c.sorted[slo.metric], None if b is None else b.sorted[slo.metric])
        for slo in config.slos
    ]


def _load_section(sides: list[tuple[Side, RequestColumns, float]]) -> dict:
    span = max(compare_load.trace_span_s(req, scale) for _, req, scale in sides)
    width = compare_load.window_width_s(max(span, 1e-3))
    count = max(1, int(np.ceil(span / width)))
    return {
        "window_trace_s": width,
        "windows": count,
        "series": {s.label: compare_load.load_windows(req, scale, width, count) for s, req, scale in sides},
    }


def _server_metrics(sides: list[tuple[Side, RequestColumns, float]]) -> dict:
    """Each run's server metrics over time, on the trace's clock like the load section; None: none stored."""
    return {s.label: run_server_metrics(s.path, s.run, scale) for s, _, scale in sides if s.kind == RUN}


def _side_summary(side: Side, req: RequestColumns, scale: float) -> dict:
    never_attempted = run_fidelity.completeness(side.run)[0] if side.kind == RUN else 0
    duration_s = own_duration_s(req)
    done = req.success
    output_tokens = float(np.nansum(req.completion_tokens[done]))
    return {
        "label": side.label,
        "path": str(side.path),
        "kind": side.kind,
        "clock_domain": side.clock_domain,
        "requests": len(req),
        "planned": len(req) + never_attempted,  # with the requests an interrupted run never got to
        "copies": int((~req.original).sum()),
        "sent": int(req.sent.sum()),
        "successful": int(done.sum()),
        "duration_s": duration_s,
        "time_scale": scale,
        "requests_per_s": len(req) / duration_s if duration_s > 0 else None,
        "output_tokens_per_s": output_tokens / duration_s if duration_s > 0 else None,
        "reasoning_share": reasoning_share(req),
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


def _cdf_points(side: Samples) -> dict:
    """Each metric's quantile function at CDF_POINTS evenly spaced levels (ms), for the charts."""
    levels = np.linspace(0, 100, CDF_POINTS)
    out = {}
    for name, values in side.sorted.items():
        out[name] = (np.percentile(values, levels) / 1e6).tolist() if values.size else []
    return out
