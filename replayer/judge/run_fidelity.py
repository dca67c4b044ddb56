"""Was one replay run complete and faithful (every planned request sent, on time, with the recorded
lengths, reading the prefix cache as production did)? One definition for `replay`, `report` and
`compare`; a run is faithful when no check fails. A check is a plain dict: check, status
(ok/warn/fail/info), value, limit, detail, summary."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from llmreplay.metrics import success_mask
from llmreplay.run_format import RunInfo
from llmreplay.trace_arrow import float_values
from replayer.judge.gate_limits import FidelityLimits
from replayer.judge.trace_cache import TraceCache

OK, WARN, FAIL, INFO = "ok", "warn", "fail", "info"
LOAD_CHECK = "same load (speed, scale)"  # a comparison's like-with-like check: refuses, never unfaithful
COMPLETED = "completed"
# Stop reasons of a run that did all it was asked to: the whole plan, or the plan up to --duration.
FINISHED_REASONS = (COMPLETED, "duration")
# The results columns the checks read (replay's summary reads only these, not the chunk offsets).
FACT_COLUMNS = (
    "sent_offset_ns",
    "error_kind",
    "http_status",
    "dispatch_lag_ns",
    "prompt_tokens",
    "recorded_prompt_tokens",
    "completion_tokens",
    "recorded_completion_tokens",
    "host",
    "source_request_id",
    "cached_tokens",
)
CACHE_SHARE_FLAG = "--max-cached-share-difference"


@dataclass(frozen=True, slots=True)
class RunFacts:
    """Per-row arrays of a run (NaN where unknown), and what run.json says about the rows it lacks."""

    sent: np.ndarray
    success: np.ndarray
    dispatch_lag_ns: np.ndarray
    prompt_tokens: np.ndarray
    recorded_prompt_tokens: np.ndarray
    completion_tokens: np.ndarray
    recorded_completion_tokens: np.ndarray
    never_attempted: int = 0  # planned but without a row: stopped before its time, or its worker lost
    stop_reason: str | None = None  # run.json's: "completed", "interrupted"; None when unknown
    host: np.ndarray | None = None  # a merged multi-host run's host of each row (None: one host)
    source_request_id: np.ndarray | None = None  # the trace request each row replays
    cached_tokens: np.ndarray | None = None
    cache_write_tokens: np.ndarray | None = None  # Anthropic's cache writes (run format 1.4 on)
    trace: TraceCache | None = None  # production's cache facts of the trace replayed (None: unknown)
    speed: float = 1.0  # the replay's --speed and --scale (run.json's)
    scale: float = 1.0

    @property
    def planned(self) -> int:
        return int(self.sent.size) + self.never_attempted

    @property
    def sent_count(self) -> int:
        return int(self.sent.sum())


def run_facts(
    table: pa.Table,
    never_attempted: int = 0,
    stop_reason: str | None = None,
    trace: TraceCache | None = None,
    load: dict | None = None,
) -> RunFacts:
    """The facts of a results table holding at least FACT_COLUMNS; `trace`: what production recorded
    of the requests (replayer.judge.trace_cache); `load`: run.json's speed and scale (stated_load)."""
    sent = np.asarray(pc.is_valid(table.column("sent_offset_ns")).to_numpy(zero_copy_only=False), dtype=bool)
    names = table.column_names
    return RunFacts(
        sent=sent,
        success=success_mask(table) & sent,
        dispatch_lag_ns=_floats(table, "dispatch_lag_ns"),
        prompt_tokens=_floats(table, "prompt_tokens"),
        recorded_prompt_tokens=_floats(table, "recorded_prompt_tokens"),
        completion_tokens=_floats(table, "completion_tokens"),
        recorded_completion_tokens=_floats(table, "recorded_completion_tokens"),
        never_attempted=max(0, int(never_attempted)),
        stop_reason=stop_reason,
        host=_hosts(table),
        source_request_id=np.asarray(table.column("source_request_id").to_pylist(), dtype=object)
        if "source_request_id" in names
        else None,
        cached_tokens=_floats(table, "cached_tokens") if "cached_tokens" in names else None,
        cache_write_tokens=_floats(table, "cache_write_tokens") if "cache_write_tokens" in names else None,
        trace=trace,
        speed=float((load or {}).get("speed", 1.0)),
        scale=float((load or {}).get("scale", 1.0)),
    )


def _hosts(table: pa.Table) -> np.ndarray | None:
    """Each row's host in a merged multi-host run; None for a run of one host."""
    if "host" not in table.column_names or table.column("host").null_count == table.num_rows:
        return None
    return np.asarray(table.column("host").to_pylist(), dtype=object)


def completeness(info: RunInfo | None) -> tuple[int, str | None]:
    """(requests planned but absent from results.parquet, stop reason) as run.json records them."""
    return (0, None) if info is None else (info.counts.not_sent, info.stop_reason)


def run_checks(
    label: str, facts: RunFacts, limits: FidelityLimits, cache_vs_trace: bool = True
) -> list[dict]:
    """Completed, everything sent, on time, with the recorded input and output lengths, the prefix
    cache read as production read it (unless `cache_vs_trace` is False: a comparison with the trace
    itself checks that), and a note when faster or heavier load shortens the prefix reuse distance;
    each check names its `side` (`label`)."""
    checks = [_completed_check(label, facts), _unsent_check(label, facts, limits)]
    timed = facts.sent & np.isfinite(facts.dispatch_lag_ns)
    checks += _lag_checks(label, "", facts.dispatch_lag_ns[timed], limits)
    if facts.host is not None:  # one client-bound host makes the merged run client-bound
        for host in sorted({h for h in facts.host.tolist() if h is not None}):
            checks += _lag_checks(
                label, f"host {host} ", facts.dispatch_lag_ns[timed & (facts.host == host)], limits
            )
    for name, measured, recorded, limit in (
        ("input tokens", facts.prompt_tokens, facts.recorded_prompt_tokens, limits.max_input_token_error_p90),
        (
            "output tokens",
            facts.completion_tokens,
            facts.recorded_completion_tokens,
            limits.max_output_token_error_p90,
        ),
    ):
        checks.append(_token_check(label, name, facts.success, measured, recorded, limit))
    if facts.trace is not None:
        replayed = _replayed(facts.trace, facts.source_request_id)
        if cache_vs_trace:
            checks.append(_trace_cache_check(label, facts, replayed, limits))
        trace = facts.trace
        gaps_s = prefix_reuse_gaps_s(
            trace.arrival_us[replayed], trace.first_block_hash[replayed], trace.has_hash[replayed]
        )
        checks.append(prefix_reuse_check(label, gaps_s, facts.speed, facts.scale))
    return [{**c, "side": label} for c in checks if c is not None]


# --- the prefix cache: the run's hit share against production's, and the reuse distance ----------


def cached_share(success: np.ndarray, prompt_tokens: np.ndarray, tokens: np.ndarray) -> float | None:
    """tokens / prompt tokens over the successful requests reporting both; None when none does."""
    mask = success & np.isfinite(tokens) & np.isfinite(prompt_tokens)
    total = prompt_tokens[mask].sum()
    return float(tokens[mask].sum() / total) if mask.any() and total > 0 else None


def cached_share_check(name: str, labels: tuple[str, str], shares: list, writes: list, limit: float) -> dict:
    """The cached-token share of two sides (`labels`: the reference first): fails when both report
    cached tokens and the shares differ by more than `limit`; an info row when a side reports none.
    The shares written to the cache (Anthropic's) ride along in the detail where a side reports them."""
    detail = _shares(labels, shares)
    if writes != [None, None]:
        detail += f"; cache writes {_shares(labels, writes)}"
    if None in shares:
        return {**check_row(name, True, None), "status": INFO, "detail": detail}
    difference = abs(shares[1] - shares[0])
    return {
        **check_row(f"{name} (difference)", difference <= limit, difference, limit),
        "detail": detail,
        "summary": f"cached-token share {shares[1]:.1%} vs {labels[0]}'s {shares[0]:.1%}: "
        f"{difference * 100:.1f} points apart > {limit * 100:g} ({CACHE_SHARE_FLAG})",
    }


def _shares(labels: tuple[str, str], shares: list) -> str:
    text = ["n/a" if s is None else f"{s:.1%}" for s in shares]
    return f"{labels[0]} {text[0]}, {labels[1]} {text[1]}"


def _replayed(trace: TraceCache, source_ids: np.ndarray | None) -> np.ndarray:
    """The trace rows the run replayed (all of them when the run does not say)."""
    if source_ids is None:
        return np.ones(trace.request_id.size, dtype=bool)
    ids = set(source_ids.tolist())
    return np.fromiter((r in ids for r in trace.request_id.tolist()), dtype=bool, count=trace.request_id.size)


def _trace_cache_check(label: str, facts: RunFacts, replayed: np.ndarray, limits: FidelityLimits) -> dict:
    """The run's cached-token share against production's over the same requests."""
    trace, nan = facts.trace, np.full(facts.sent.size, np.nan)
    run_cached = nan if facts.cached_tokens is None else facts.cached_tokens
    run_writes = nan if facts.cache_write_tokens is None else facts.cache_write_tokens
    shares = [
        cached_share(trace.success[replayed], trace.prompt_tokens[replayed], trace.cached_tokens[replayed]),
        cached_share(facts.success, facts.prompt_tokens, run_cached),
    ]
    writes = [
        cached_share(
            trace.success[replayed], trace.prompt_tokens[replayed], trace.cache_write_tokens[replayed]
        ),
        cached_share(facts.success, facts.prompt_tokens, run_writes),
    ]
    check = cached_share_check(
        f"{label}: cached-token share vs production",
        ("production", label),
        shares,
        writes,
        limits.max_cached_share_difference,
    )
    if trace.note:
        check["detail"] += f" ({trace.note})"
    return check


def prefix_reuse_gaps_s(
    arrival_us: np.ndarray, first_block_hash: np.ndarray, has_hash: np.ndarray
) -> np.ndarray:
    """Each request's gap (s) to its sharer: the latest earlier request with the same first prefix-block
    hash (chained hashes: the same first hash is the same first block). One pass in arrival order."""
    order = np.argsort(arrival_us, kind="stable")
    order = order[has_hash[order]]
    last: dict[int, int] = {}
    gaps = []
    for at, key in zip(arrival_us[order].tolist(), first_block_hash[order].tolist(), strict=True):
        before = last.get(key)
        if before is not None:
            gaps.append(at - before)
        last[key] = at
    return np.asarray(gaps, dtype=float) / 1e6


def prefix_reuse_check(label: str, gaps_s: np.ndarray, speed: float, scale: float) -> dict | None:
    """At --speed S the time between a request and the earlier one it shares a prefix with shrinks S
    times; at --scale K, K times the requests pass through the cache in between. Either way the engine
    may evict what production reused: a warning (an info row when the load is lighter). None at 1x."""
    if (speed == 1 and scale == 1) or not gaps_s.size:
        return None
    p50 = float(np.percentile(gaps_s, 50))
    load = [f"speed {speed:g}x"] if speed != 1 else []
    load += [f"scale {scale:g}"] if scale != 1 else []
    heavier = speed * scale > 1
    detail = (
        f"requests reuse a prefix sent {_seconds(p50)} earlier (p50) in production; at {', '.join(load)} "
        f"that is {_seconds(p50 / speed)}"
        + (f" with {scale:g}x the requests in between" if scale != 1 else "")
        + ("; the engine's cache may evict what production reused" if heavier else "")
    )
    return {
        **check_row(f"{label}: prefix reuse gap p50 (s)", True, p50 / speed),
        "status": WARN if heavier else INFO,
        "detail": detail,
        "summary": detail,
    }


def _seconds(value: float) -> str:
    return f"{value:.3g} s" if value < 100 else f"{value:,.0f} s"


def _lag_checks(label: str, who: str, lag_ns: np.ndarray, limits: FidelityLimits) -> list[dict]:
    """The dispatch-lag p99 check of the rows given (none when there are none)."""
    if not lag_ns.size:
        return []
    p50, p99, worst = np.percentile(lag_ns / 1e6, [50, 99, 100])
    limit_ms = limits.max_dispatch_lag_p99_ns / 1e6
    return [
        {
            **check_row(f"{label}: {who}dispatch lag p99 (ms)", p99 <= limit_ms, p99, limit_ms),
            "detail": f"p50 {p50:.2f} ms, p99 {p99:.2f} ms, max {worst:.2f} ms",
            "summary": f"{who}dispatch lag p99 {p99:.2f} ms > {limit_ms:g} ms (--max-dispatch-lag)",
        }
    ]


def _completed_check(label: str, facts: RunFacts) -> dict:
    name = f"{label}: run completed"
    progress = f"{facts.sent_count:,} of {facts.planned:,} requests"
    if facts.stop_reason is None:
        return {**check_row(name, True, None), "status": INFO, "detail": "stop reason unknown (no run.json)"}
    if facts.stop_reason in FINISHED_REASONS:
        return {**check_row(name, True, facts.sent_count), "detail": f"{facts.stop_reason}: sent {progress}"}
    return {
        **check_row(name, False, facts.sent_count),
        "detail": f"{facts.stop_reason} after {progress}: the rest of the trace was never replayed",
        "summary": f"{facts.stop_reason} after {progress}",
    }


def _unsent_check(label: str, facts: RunFacts, limits: FidelityLimits) -> dict:
    shed = int((~facts.sent).sum())
    unsent = shed + facts.never_attempted
    share = unsent / facts.planned if facts.planned else 0.0
    return {
        **check_row(
            f"{label}: requests not sent", share <= limits.max_unsent_share, share, limits.max_unsent_share
        ),
        "detail": (
            f"{unsent:,} of {facts.planned:,} not sent ({share:.1%}): {shed:,} shed by --max-inflight, "
            f"{facts.never_attempted:,} never attempted"
        ),
        "summary": f"{unsent:,} of {facts.planned:,} requests not sent ({share:.1%} > {limits.max_unsent_share:.0%})",
    }


def _token_check(label: str, name: str, success: np.ndarray, measured, recorded, limit: float) -> dict:
    title = f"{label}: {name} vs recorded"
    mask = success & np.isfinite(measured) & np.isfinite(recorded)
    if not mask.any():
        return {
            **check_row(title, True, None, limit),
            "status": INFO,
            "detail": "no request with both counts",
        }
    error = np.abs(measured[mask] - recorded[mask]) / np.maximum(recorded[mask], 1.0)
    p50, p90 = np.percentile(error, [50, 90])
    exact = float((measured[mask] == recorded[mask]).mean())
    return {
        **check_row(title + " (relative error p90)", p90 <= limit, p90, limit),
        "detail": f"{mask.sum()} requests, exact {exact:.1%}, error p50 {p50:.1%}, p90 {p90:.1%}",
        "summary": f"{name} off by {p90:.0%} (p90) > {limit:.0%}",
    }


def check_row(name: str, ok: bool, value: float | None, limit: float | None = None) -> dict:
    return {
        "check": name,
        "status": OK if ok else FAIL,
        "value": None if value is None else float(value),
        "limit": limit,
        "detail": "",
        "summary": name,
    }


def failed(checks: list[dict]) -> list[dict]:
    return [c for c in checks if c["status"] == FAIL]


def _floats(table: pa.Table, name: str) -> np.ndarray:
    return float_values(table.column(name))
