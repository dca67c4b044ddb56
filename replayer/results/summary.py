"""The end-of-run summary: latency percentiles (from the send and from the schedule), throughput,
errors by kind with their commonest messages, and the run's verdict — the same checks `report`
makes (replayer.judge.run_fidelity, replayer.judge.error_gate, replayer.judge.verdict). Pure over the results
table, plus printers; `--quiet` prints the verdict line alone.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from rich.markup import escape

from llmreplay.metrics import (
    BY_NAME,
    METRICS,
    PERCENTILES,
    itl_values_ns,
    latency_summary_ms,
    percentiles,
    success_mask,
)
from replayer.judge import run_fidelity
from replayer.judge.error_gate import commonest_messages, engine_error_mask, error_counts, error_rate_check
from replayer.judge.gate_limits import MAX_ERROR_RATE, FidelityLimits
from replayer.judge.trace_cache import TraceCache
from replayer.judge.verdict import verdict
from replayer.results.percentiles import streamed_percentiles
from replayer.results.prompt_lengths import print_prompt_lengths

LAG_PERCENTILES = (50, 90, 99)
# The per-request columns `summarize_file` reads whole; the chunk offsets are streamed for the ITL.
COLUMNS = tuple(
    dict.fromkeys(
        (
            *run_fidelity.FACT_COLUMNS,
            "session_wait_ns",
            *(column for m in METRICS if not m.per_gap for column in m.columns),
            "error_detail",
            "warmup",
        )
    )
)
ITL_BATCH_ROWS = 4096  # ~150 chunks a row: a few MB a batch


def _ns_array(table: pa.Table, name: str) -> np.ndarray:
    return np.asarray(pc.cast(table.column(name), pa.float64()).to_numpy(zero_copy_only=False), dtype=float)


def from_schedule(table: pa.Table) -> pa.Table:
    """Metrics measured from the request's start, from its due time instead (coordinated-omission view)."""
    lag = pc.fill_null(table.column("dispatch_lag_ns"), 0)
    out = table
    for name in (m.columns[0] for m in METRICS if m.from_start):
        index = out.schema.get_field_index(name)
        out = out.set_column(index, name, pc.add(out.column(name), lag))
    return out


def summarize_file(
    path: Path,
    limits: FidelityLimits | None = None,
    max_error_rate: float = MAX_ERROR_RATE,
    never_attempted: int = 0,
    stop_reason: str | None = None,
    trace: TraceCache | None = None,
    load: dict | None = None,
) -> dict:
    """`summarize` of a run's measured rows (warm-up rows are in no verdict), holding its per-request
    columns but not every inter-chunk gap (the ITL percentiles are computed in passes over the file, exactly)."""
    table = measured_rows(pq.read_table(path, columns=list(COLUMNS)))
    return summarize(
        table, limits, max_error_rate, never_attempted, stop_reason, itl_summary_ms(path), trace, load
    )


def itl_summary_ms(path: Path) -> dict:
    """The ITL entry of latency_summary_ms for the sent requests of a results file, streamed."""

    def passes():
        columns = ["sent_offset_ns", "error_kind", "http_status", "chunk_offsets_ns", "warmup"]
        for batch in pq.ParquetFile(path).iter_batches(ITL_BATCH_ROWS, columns=columns):
            table = measured_rows(pa.Table.from_batches([batch]))
            yield itl_values_ns(table.filter(pc.is_valid(table.column("sent_offset_ns"))))

    count, points = streamed_percentiles(passes, PERCENTILES, scale=1e6)
    return {"count": count, **points}


def measured_rows(table: pa.Table) -> pa.Table:
    """The rows of the measured window: a run's warm-up rows (run format 1.4) dropped."""
    if "warmup" not in table.column_names:
        return table
    return table.filter(pc.invert(pc.fill_null(table.column("warmup"), False)))


def summarize(
    table: pa.Table,
    limits: FidelityLimits | None = None,
    max_error_rate: float = MAX_ERROR_RATE,
    never_attempted: int = 0,
    stop_reason: str | None = None,
    itl_ms: dict | None = None,
    trace: TraceCache | None = None,
    load: dict | None = None,
) -> dict:
    """Everything the summary prints, as JSON-able values (ms for times). `never_attempted`: planned
    requests without a row (the run stopped before their time); `itl_ms`: see
    llmreplay.metrics.latency_summary_ms; `trace`, `load`: as replayer.judge.run_fidelity.run_facts takes."""
    limits = limits or FidelityLimits()
    sent_table = table.filter(pc.is_valid(table.column("sent_offset_ns")))
    ok = success_mask(sent_table)
    errors = pc.value_counts(pc.drop_null(table.column("error_kind"))).to_pylist()
    span_s = _span_s(sent_table)
    facts = run_fidelity.run_facts(table, never_attempted, stop_reason, trace, load)
    fidelity = run_fidelity.run_checks("run", facts, limits)
    counts, gate, top = _error_checks(table, facts, max_error_rate)
    run_verdict = verdict(
        "replay",
        fidelity,
        [gate],
        [],
        {"run": {"successful": int(facts.success.sum()), "requests": facts.planned}},
    )
    return {
        "requests": table.num_rows,
        "planned": facts.planned,  # rows + planned requests the run never got to
        "sent": int(sent_table.num_rows),
        "succeeded": int(ok.sum()),
        "stop_reason": stop_reason,
        "errors": {e["values"]: int(e["counts"]) for e in errors},
        "error_rate": counts["error_rate"],
        "top_errors": top,
        "span_s": round(span_s, 3),
        "throughput": _throughput(sent_table, ok, span_s),
        "latency_ms": latency_summary_ms(sent_table, itl_ms=itl_ms),
        "latency_from_schedule_ms": latency_summary_ms(from_schedule(sent_table), itl_ms=itl_ms),
        "dispatch_lag_ms": _dispatch_lag_ms(sent_table),
        "session_wait_ms": percentiles(_ns_array(sent_table, "session_wait_ns") / 1e6, LAG_PERCENTILES),
        "max_dispatch_lag_ms": limits.max_dispatch_lag_p99_ns / 1e6,
        "max_error_rate": max_error_rate,
        "checks": [*fidelity, gate],
        "verdict": run_verdict,
    }


def _span_s(sent_table: pa.Table) -> float:
    """First send to last end (a row without an E2E ends at its send), in seconds; 0 when none was sent."""
    start = _ns_array(sent_table, "sent_offset_ns")
    end = start + np.nan_to_num(_ns_array(sent_table, "e2e_ns"))
    return float((end.max() - start.min()) / 1e9) if len(start) else 0.0


def _throughput(sent_table: pa.Table, ok: np.ndarray, span_s: float) -> dict:
    """Successful requests and their output tokens per second of the span; None for an empty span."""
    completion = _ns_array(sent_table, "completion_tokens")[ok]
    return {
        "requests_per_s": round(ok.sum() / span_s, 3) if span_s > 0 else None,
        "output_tokens_per_s": round(float(np.nansum(completion)) / span_s, 1) if span_s > 0 else None,
    }


def _dispatch_lag_ms(sent_table: pa.Table) -> dict:
    """Send time minus scheduled time: its percentiles and maximum (None when nothing was sent), ms."""
    lag_ms = _ns_array(sent_table, "dispatch_lag_ns") / 1e6
    return {**percentiles(lag_ms, LAG_PERCENTILES), "max": float(lag_ms.max()) if len(lag_ms) else None}


def _error_checks(
    table: pa.Table, facts: run_fidelity.RunFacts, max_error_rate: float
) -> tuple[dict, dict, list[dict]]:
    """The error counts, the error-rate check against `max_error_rate`, and the commonest messages
    of the engine's errors (the run's `facts` say which rows were sent and succeeded)."""
    kinds = np.array(table.column("error_kind").to_pylist(), dtype=object)
    counts = error_counts(kinds, facts.sent, facts.success)
    gate = error_rate_check("run", counts, max_error_rate)
    failed = engine_error_mask(kinds, facts.sent, facts.success)
    top = commonest_messages(
        kinds,
        _ns_array(table, "http_status"),
        np.array(table.column("error_detail").to_pylist(), dtype=object),
        failed,
    )
    return counts, gate, top


def print_summary(summary: dict, console) -> None:
    from rich.table import Table

    table = Table(title="llmreplay replay", show_header=True)
    table.add_column("metric")
    for q in ("count", "p50", "p90", "p99"):
        table.add_column(q, justify="right")
    for view, key in (("", "latency_ms"), (" (from schedule)", "latency_from_schedule_ms")):
        for name, values in summary[key].items():
            if view and not BY_NAME[name].from_start:
                continue  # gaps do not depend on when the request was sent
            table.add_row(
                f"{name.upper()} ms{view}",
                str(values["count"]),
                *(_fmt(values[q]) for q in ("p50", "p90", "p99")),
            )
    lag = summary["dispatch_lag_ms"]
    table.add_row(
        "dispatch lag ms", str(summary["sent"]), _fmt(lag["p50"]), _fmt(lag["p90"]), _fmt(lag["p99"])
    )
    console.print(table)
    tp = summary["throughput"]
    stopped = ""
    if summary["stop_reason"] not in (None, *run_fidelity.FINISHED_REASONS):
        stopped = f"; {summary['stop_reason']} after {summary['sent']} of {summary['planned']} requests"
    console.print(
        f"sent {summary['sent']} of {summary['planned']}, succeeded {summary['succeeded']} in {summary['span_s']} s: "
        f"{tp['requests_per_s']} req/s, {tp['output_tokens_per_s']} output tokens/s; max dispatch lag "
        f"{_fmt(lag['max'])} ms{stopped}"
    )
    if summary["errors"]:
        console.print("errors: " + ", ".join(f"{k} {v}" for k, v in sorted(summary["errors"].items())))
    for message in summary["top_errors"]:
        status = "" if message["status"] is None else f" {message['status']}"
        console.print(
            f"  {message['count']} x {message['kind']}{status}: {escape(message['message'] or '(no message)')}",
            soft_wrap=True,
        )
    _print_phases(summary, console)
    print_prompt_lengths(summary.get("prompt_lengths"), console)
    for check in summary["checks"]:
        mark = {run_fidelity.FAIL: "[red]x[/]", run_fidelity.WARN: "[yellow]![/]"}.get(check["status"])
        if mark:
            console.print(f"{mark} {escape(check['check'])}: {escape(check['detail'])}", soft_wrap=True)
    print_verdict(summary, console)


def _print_phases(summary: dict, console) -> None:
    """The cold-start note and a soak's drift headline and findings (replayer.measured.cold_start, .drift)."""
    cold = summary.get("cold_start")
    if cold and cold["requests"] and cold["source"] == "warmup":
        console.print(f"warm-up: {cold['requests']} requests sent first, in no verdict")
    if cold and cold["note"]:
        console.print(f"[yellow]note:[/] {escape(cold['note'])}", soft_wrap=True)
    drift = summary.get("drift")
    if drift:
        console.print(
            f"drift, loop {drift['last_loop']} vs loop {drift['first_loop']}: {escape(drift['headline'])}",
            soft_wrap=True,
        )
        for line in drift["findings"]:
            console.print(f"[bold red]finding:[/] {escape(line)}", soft_wrap=True)


def print_verdict(summary: dict, console) -> None:
    """The run's verdict in one line (all `--quiet` prints)."""
    verdict_ = summary["verdict"]
    word, _, rest = verdict_["headline"].partition(": ")
    style = "bold green" if verdict_["status"] == "pass" else "bold red"
    console.print(f"[{style}]{word}[/]: {escape(rest)}", soft_wrap=True)


def _fmt(value) -> str:
    return "-" if value is None else f"{value:.2f}"
