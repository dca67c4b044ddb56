"""Was one replay run complete and faithful (every planned request sent, on time, with the recorded
lengths)? One definition for `replay`, `report` and `compare`; a run is faithful when no check fails.
A check is a plain dict: check, status (ok/warn/fail/info), value, limit, detail, summary."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from llmreplay.metrics import success_mask
from replayer.compare.gate_limits import FidelityLimits

OK, WARN, FAIL, INFO = "ok", "warn", "fail", "info"
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
)


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

    @property
    def planned(self) -> int:
        return int(self.sent.size) + self.never_attempted

    @property
    def sent_count(self) -> int:
        return int(self.sent.sum())


def run_facts(table: pa.Table, never_attempted: int = 0, stop_reason: str | None = None) -> RunFacts:
    """The facts of a results table holding at least FACT_COLUMNS."""
    sent = np.asarray(pc.is_valid(table.column("sent_offset_ns")).to_numpy(zero_copy_only=False), dtype=bool)
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
    )


def _hosts(table: pa.Table) -> np.ndarray | None:
    """Each row's host in a merged multi-host run; None for a run of one host."""
    if "host" not in table.column_names or table.column("host").null_count == table.num_rows:
        return None
    return np.asarray(table.column("host").to_pylist(), dtype=object)


def completeness(run_json: dict) -> tuple[int, str | None]:
    """(requests planned but absent from results.parquet, stop reason) as run.json records them."""
    counts = run_json.get("counts") if isinstance(run_json.get("counts"), dict) else {}
    not_sent = counts.get("not_sent")
    reason = run_json.get("stop_reason")
    return (
        not_sent if isinstance(not_sent, int) and not isinstance(not_sent, bool) else 0,
        reason if isinstance(reason, str) else None,
    )


def run_checks(label: str, facts: RunFacts, limits: FidelityLimits) -> list[dict]:
    """Completed, everything sent, on time, with the recorded input and output lengths; each check
    names its `side` (`label`)."""
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
    return [{**c, "side": label} for c in checks]


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
    return np.asarray(pc.cast(table.column(name), pa.float64()).to_numpy(zero_copy_only=False), dtype=float)
