"""Per-request arrays of one side, in the shape every comparison section needs.

Latencies come from llmreplay.metrics (one definition for traces and runs); this module only
adds where each request sits in time, what shape it had and whether it counts as an engine error.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from llmreplay.metrics import BY_NAME, per_request_latencies_ns, success_mask
from llmreplay.run_format import stated_load
from llmreplay.trace_arrow import float_values
from replayer.judge.error_gate import CLIENT_SIDE_ERRORS
from replayer.measured.side import RUN, Side

LOAD_MATCH_TOLERANCE = 0.01  # relative difference of speed or scale still called the same load


@dataclass(frozen=True, slots=True)
class RequestColumns:
    """Column arrays, one entry per row of the side (NaN where a value is unknown)."""

    key: np.ndarray  # join key: trace request id (replay copies share it)
    original: np.ndarray  # False for --scale copies and for --soak loops after the first
    sent: np.ndarray
    success: np.ndarray
    counted: np.ndarray  # sent and not ended by the client: the base of the error rate
    error_kind: np.ndarray
    http_status: np.ndarray
    error_detail: np.ndarray  # what a failed request said (runs of format 1.1 on; else None)
    latency_ns: dict[str, np.ndarray]  # each per-request metric (NaN unless successful)
    start_ns: np.ndarray  # on the side's own clock (gateway arrival or actual send), from its first request
    end_ns: np.ndarray
    trace_offset_ns: np.ndarray  # the request's arrival in the trace, from the first arrival
    prompt_tokens: np.ndarray  # as measured on this side
    completion_tokens: np.ndarray
    reasoning_tokens: np.ndarray  # of completion_tokens (trace and run format 1.2 on; NaN before)
    cached_tokens: np.ndarray
    cache_write_tokens: np.ndarray  # Anthropic's cache writes (trace format 1.3, run format 1.4 on)
    shape_prompt_tokens: np.ndarray  # the recorded length, identical for the same request on both sides
    recorded_completion_tokens: np.ndarray
    stream: np.ndarray
    tools: np.ndarray
    model: np.ndarray
    endpoint: np.ndarray  # the API the request was sent to (llmreplay.wire.endpoints)
    scheduled_offset_ns: np.ndarray
    dispatch_lag_ns: np.ndarray
    session_wait_ns: np.ndarray
    itl_gaps_ns: np.ndarray  # llmreplay.metrics.itl_values_ns, with the row each gap belongs to:
    itl_owner: np.ndarray  # so buckets select gaps by mask instead of re-filtering the table

    def __len__(self) -> int:
        return self.key.size


def build_requests(side: Side) -> RequestColumns:
    table = side.table
    is_run = side.kind == RUN
    ok = success_mask(table)
    error_kind = _objects(table, "error_kind")
    client_side = np.array([kind in CLIENT_SIDE_ERRORS for kind in error_kind], dtype=bool)
    arrival_ns = _floats(pc.cast(table.column("arrival_time"), pa.int64())) * 1_000  # us -> ns
    trace_offset_ns = arrival_ns - np.nanmin(arrival_ns)
    if is_run:
        start = _floats(table.column("sent_offset_ns"))
        sent = np.isfinite(start)
    else:
        start = trace_offset_ns.copy()
        sent = np.ones(table.num_rows, dtype=bool)
    first = np.nanmin(start) if sent.any() else 0.0
    start = start - first
    e2e = _floats(table.column("e2e_ns"))
    end = start + np.where(np.isfinite(e2e), e2e, 0.0)
    prompt = _floats(table.column("prompt_tokens"))
    completion = _floats(table.column("completion_tokens"))
    recorded_prompt = _floats(table.column("recorded_prompt_tokens")) if is_run else prompt
    recorded_completion = _floats(table.column("recorded_completion_tokens")) if is_run else completion
    nan = np.full(table.num_rows, np.nan)
    return RequestColumns(
        key=_objects(table, side.join_key),
        original=((_floats(table.column("copy_index")) == 0) & (_floats(table.column("loop")) == 0))
        if is_run
        else np.ones(table.num_rows, dtype=bool),
        sent=sent,
        success=ok & sent,
        counted=sent & ~client_side,
        error_kind=error_kind,
        http_status=_floats(table.column("http_status")),
        error_detail=_objects(table, "error_detail")
        if "error_detail" in table.column_names
        else np.full(table.num_rows, None, dtype=object),
        latency_ns=_streamed_only(per_request_latencies_ns(table), _bools(table, "stream")),
        start_ns=start,
        end_ns=end,
        trace_offset_ns=trace_offset_ns,
        prompt_tokens=prompt,
        completion_tokens=completion,
        reasoning_tokens=_floats(table.column("reasoning_tokens")),
        cached_tokens=_floats(table.column("cached_tokens")),
        cache_write_tokens=_floats(table.column("cache_write_tokens"))
        if "cache_write_tokens" in table.column_names
        else nan,
        shape_prompt_tokens=np.where(np.isfinite(recorded_prompt), recorded_prompt, prompt),
        recorded_completion_tokens=recorded_completion,
        stream=_bools(table, "stream"),
        tools=_floats(table.column("tools_count")) > 0,
        model=_recorded_models(table),
        endpoint=_objects(table, "endpoint")
        if "endpoint" in table.column_names
        else np.full(table.num_rows, "chat_completions", dtype=object),
        scheduled_offset_ns=_floats(table.column("scheduled_offset_ns")) if is_run else nan,
        dispatch_lag_ns=_floats(table.column("dispatch_lag_ns")) if is_run else nan,
        session_wait_ns=_floats(table.column("session_wait_ns")) if is_run else nan,
        **_itl_by_row(table, ok),
    )


def _recorded_models(table: pa.Table) -> np.ndarray:
    """The model each row was recorded with, for the per-model breakdown: a run's `recorded_model`
    (its `model` is the name sent, which --model-map or --model changed), else `model`."""
    names = table.column("model")
    if "recorded_model" in table.column_names:
        names = pc.coalesce(table.column("recorded_model"), names)
    return np.array([m if m is not None else "(none)" for m in names.to_pylist()], dtype=object)


def _itl_by_row(table: pa.Table, ok: np.ndarray) -> dict[str, np.ndarray]:
    """Gaps between consecutive chunk offsets of successful requests, tagged with their row."""
    offsets = table.column("chunk_offsets_ns").combine_chunks()
    lengths = np.asarray(
        pc.fill_null(pc.list_value_length(offsets), 0).to_numpy(zero_copy_only=False), dtype=np.int64
    )
    values = np.asarray(pc.list_flatten(offsets).to_numpy(zero_copy_only=False), dtype=float)
    owner = np.repeat(np.arange(table.num_rows), lengths)
    if values.size < 2:
        return {"itl_gaps_ns": np.empty(0), "itl_owner": np.empty(0, dtype=np.int64)}
    gaps = np.diff(values)
    same_request = owner[1:] == owner[:-1]
    keep = same_request & ok[owner[1:]]
    return {"itl_gaps_ns": gaps[keep], "itl_owner": owner[1:][keep]}


def _streamed_only(latency_ns: dict[str, np.ndarray], stream: np.ndarray) -> dict[str, np.ndarray]:
    """Streamed-only metrics (llmreplay.metrics) of streamed requests only: a non-streamed answer arrives in one piece.

    Recorders leave its TTFT empty while clients may time the body; either way it is E2E, and
    mixing it in would compare different things on the two sides.
    """
    return {
        name: np.where(stream, values, np.nan) if BY_NAME[name].streamed_only else values
        for name, values in latency_ns.items()
    }


def time_scale(side: Side, requests: RequestColumns) -> float:
    """Trace seconds per second of this side's own clock: the replay speed (1 for a trace).

    Taken from run.json when it states a speed, else estimated from the schedule's span.
    """
    if side.kind != RUN:
        return 1.0
    if "speed" in (stated := stated_load(side.run)):
        return stated["speed"]
    mask = requests.original & np.isfinite(requests.scheduled_offset_ns)
    if mask.sum() < 2:
        return 1.0
    trace_span = np.ptp(requests.trace_offset_ns[mask])
    schedule_span = np.ptp(requests.scheduled_offset_ns[mask])
    return float(trace_span / schedule_span) if schedule_span > 0 and trace_span > 0 else 1.0


def side_load(side: Side, requests: RequestColumns) -> dict:
    """The load a side ran at: replay speed and scale (a trace ran at 1 and 1), and whether run.json said so."""
    if side.kind != RUN:
        return {"speed": 1.0, "scale": 1.0, "stated": True}
    stated = stated_load(side.run)
    originals = int(requests.original.sum())
    scale = stated.get("scale", len(requests) / originals if originals else 1.0)
    return {
        "speed": stated.get("speed", time_scale(side, requests)),
        "scale": scale,
        "stated": set(stated) == {"speed", "scale"},
    }


def same_load(a: dict, b: dict) -> bool:
    return all(
        abs(a[name] - b[name]) <= LOAD_MATCH_TOLERANCE * max(a[name], b[name]) for name in ("speed", "scale")
    )


def own_duration_s(requests: RequestColumns) -> float:
    """First start to last end on the side's own clock."""
    if not requests.sent.any():
        return 0.0
    return float(
        (np.nanmax(requests.end_ns[requests.sent]) - np.nanmin(requests.start_ns[requests.sent])) / 1e9
    )


_floats = float_values


def _objects(table: pa.Table, name: str) -> np.ndarray:
    return np.array(table.column(name).to_pylist(), dtype=object)


def _bools(table: pa.Table, name: str) -> np.ndarray:
    return np.asarray(pc.fill_null(table.column(name), False).to_numpy(zero_copy_only=False), dtype=bool)
