"""The end-of-run summary: latency percentiles (from the send and from the schedule), throughput,
errors by kind and the dispatch-lag fidelity check. Pure over the results table, plus a printer.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from llmreplay.metrics import PERCENTILES, itl_values_ns, latency_summary_ms, percentiles, success_mask
from replayer.streamed_percentiles import streamed_percentiles

LAG_PERCENTILES = (50, 90, 99)
# The per-request columns `summarize_file` reads whole; the chunk offsets are streamed for the ITL.
COLUMNS = (
    "sent_offset_ns",
    "error_kind",
    "http_status",
    "dispatch_lag_ns",
    "session_wait_ns",
    "ttft_ns",
    "e2e_ns",
    "completion_tokens",
)
ITL_BATCH_ROWS = 4096  # ~150 chunks a row: a few MB a batch


def _ns_array(table: pa.Table, name: str) -> np.ndarray:
    return np.asarray(pc.cast(table.column(name), pa.float64()).to_numpy(zero_copy_only=False), dtype=float)


def from_schedule(table: pa.Table) -> pa.Table:
    """TTFT and E2E measured from the due time instead of the send (coordinated-omission view)."""
    lag = pc.fill_null(table.column("dispatch_lag_ns"), 0)
    out = table
    for name in ("ttft_ns", "e2e_ns"):
        index = out.schema.get_field_index(name)
        out = out.set_column(index, name, pc.add(out.column(name), lag))
    return out


def summarize_file(path: Path, lag_bound_ns: int) -> dict:
    """`summarize` of a run's results file, holding its per-request columns but not every
    inter-chunk gap (the ITL percentiles are computed in passes over the file, exactly)."""
    table = pq.read_table(path, columns=list(COLUMNS))
    return summarize(table, lag_bound_ns, itl_summary_ms(path))


def itl_summary_ms(path: Path) -> dict:
    """The ITL entry of latency_summary_ms for the sent requests of a results file, streamed."""

    def passes():
        columns = ["sent_offset_ns", "error_kind", "http_status", "chunk_offsets_ns"]
        for batch in pq.ParquetFile(path).iter_batches(ITL_BATCH_ROWS, columns=columns):
            table = pa.Table.from_batches([batch])
            yield itl_values_ns(table.filter(pc.is_valid(table.column("sent_offset_ns"))))

    count, points = streamed_percentiles(passes, PERCENTILES, scale=1e6)
    return {"count": count, **points}


def summarize(table: pa.Table, lag_bound_ns: int, itl_ms: dict | None = None) -> dict:
    """Everything the summary prints, as JSON-able values (ms for times). `itl_ms`: see
    llmreplay.metrics.latency_summary_ms."""
    sent = pc.is_valid(table.column("sent_offset_ns"))
    sent_table = table.filter(sent)
    ok = success_mask(sent_table)
    errors = pc.value_counts(pc.drop_null(table.column("error_kind"))).to_pylist()
    lag_ms = _ns_array(sent_table, "dispatch_lag_ns") / 1e6
    wait_ms = _ns_array(sent_table, "session_wait_ns") / 1e6
    start = _ns_array(sent_table, "sent_offset_ns")
    end = start + np.nan_to_num(_ns_array(sent_table, "e2e_ns"))
    span_s = float((end.max() - start.min()) / 1e9) if len(start) else 0.0
    completion = _ns_array(sent_table, "completion_tokens")[ok]
    lag = {**percentiles(lag_ms, LAG_PERCENTILES), "max": float(lag_ms.max()) if len(lag_ms) else None}
    lag_p99 = lag["p99"]
    return {
        "requests": table.num_rows,
        "sent": int(sent_table.num_rows),
        "succeeded": int(ok.sum()),
        "errors": {e["values"]: int(e["counts"]) for e in errors},
        "span_s": round(span_s, 3),
        "throughput": {
            "requests_per_s": round(ok.sum() / span_s, 3) if span_s > 0 else None,
            "output_tokens_per_s": round(float(np.nansum(completion)) / span_s, 1) if span_s > 0 else None,
        },
        "latency_ms": latency_summary_ms(sent_table, itl_ms=itl_ms),
        "latency_from_schedule_ms": latency_summary_ms(from_schedule(sent_table), itl_ms=itl_ms),
        "dispatch_lag_ms": lag,
        "session_wait_ms": percentiles(wait_ms, LAG_PERCENTILES),
        "lag_bound_ms": lag_bound_ns / 1e6,
        "client_fell_behind": bool(lag_p99 is not None and lag_p99 > lag_bound_ns / 1e6),
    }


def print_summary(summary: dict, console) -> None:
    from rich.table import Table

    table = Table(title="llmreplay replay", show_header=True)
    table.add_column("metric")
    for q in ("count", "p50", "p90", "p99"):
        table.add_column(q, justify="right")
    for view, key in (("", "latency_ms"), (" (from schedule)", "latency_from_schedule_ms")):
        for name, values in summary[key].items():
            if view and name in ("itl", "tpot"):
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
    console.print(
        f"sent {summary['sent']} of {summary['requests']}, succeeded {summary['succeeded']} in {summary['span_s']} s: "
        f"{tp['requests_per_s']} req/s, {tp['output_tokens_per_s']} output tokens/s; max dispatch lag {_fmt(lag['max'])} ms"
    )
    if summary["errors"]:
        console.print("errors: " + ", ".join(f"{k} {v}" for k, v in sorted(summary["errors"].items())))
    if summary["client_fell_behind"]:
        console.print(
            f"[bold red]NOT A FAITHFUL REPLAY: dispatch lag p99 {_fmt(lag['p99'])} ms exceeds "
            f"{summary['lag_bound_ms']} ms; the client fell behind the schedule. Latencies from the schedule "
            "include that delay; use --workers, a lower --speed/--scale or a bigger machine.[/bold red]"
        )


def _fmt(value) -> str:
    return "-" if value is None else f"{value:.2f}"
