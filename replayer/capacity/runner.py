"""The capacity command's work: choose the window, run the search step by step (capacity.json rewritten
after each), then the points. I/O here; the decisions are replayer.capacity.search's and .points'."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pyarrow.compute as pc

import replayer.capacity.points as points
from llmreplay.errors import BadInput
from llmreplay.trace_io import read_trace
from replayer.capacity.config import CapacityConfig
from replayer.capacity.document import FORMAT, FORMAT_VERSION, read_capacity, refuse_changed, write_capacity
from replayer.capacity.search import SUSTAIN, SearchSettings, search
from replayer.capacity.step import StepPlan, StepResult, run_step
from replayer.capacity.terminal import progress_line
from replayer.capacity.window import Peak, Window, busiest_stretch, peak_minute, warmup_before

CLIENT_ADVICE = (
    "the replay client could not keep the schedule, so this is the client's limit, not the server's: "
    "run with more --workers (one per free core), or from another host closer to the target"
)


def trace_offsets(path: str) -> tuple[np.ndarray, np.ndarray]:
    """(arrival offsets ns from the first request, output tokens) of every trace row."""
    trace = read_trace(path, columns=["arrival_time", "completion_tokens"])
    arrival_us = np.asarray(
        pc.cast(trace.table.column("arrival_time"), "int64").to_numpy(zero_copy_only=False)
    )
    if arrival_us.size == 0:
        raise BadInput(f"{path}: the trace has no requests")
    tokens = np.asarray(
        pc.cast(trace.table.column("completion_tokens"), "float64").to_numpy(zero_copy_only=False)
    )
    return (arrival_us - arrival_us.min()) * 1000, tokens


def run_capacity(config: CapacityConfig, console=None, clock=time.monotonic) -> dict:
    """The whole search into config.out_dir; returns capacity.json's document (also written there)."""
    if config.start_factor > config.max_factor:
        raise BadInput(f"--start-factor {config.start_factor:g}: above --max-factor {config.max_factor:g}")
    out_dir = Path(config.out_dir)
    settings = config.settings()
    refuse_changed(read_capacity(out_dir), settings, out_dir)
    offsets, tokens = trace_offsets(config.trace_path)
    window = busiest_stretch(offsets, config.window_ns)
    warmup_start, warmup_requests = warmup_before(offsets, window, config.step_warmup_ns)
    sustain_end = min(int(offsets.max()) + 1, window.start_ns + config.sustain_or_default_ns)
    peak = peak_minute(offsets, tokens)
    out_dir.mkdir(parents=True, exist_ok=True)
    started = clock()
    steps: list[dict] = []
    document = _document(settings, window, warmup_start, warmup_requests, peak, steps)
    analysis = {
        "slos": config.slos,
        "limits": config.replay.limits,
        "max_error_rate": config.replay.max_error_rate,
    }

    def one_step(factor: float, kind: str) -> StepResult:
        end = max(sustain_end, window.end_ns) if kind == SUSTAIN else window.end_ns
        plan = StepPlan(len(steps), factor, kind, warmup_start, window.start_ns, end)
        result = run_step(plan, config.replay, config.by, out_dir, analysis, console, live)
        steps.append(result.row)
        if console is not None and not config.replay.quiet:
            console.print(progress_line(result.row), markup=False, highlight=False, soft_wrap=True)
        write_capacity(out_dir, {**document, "stop_reason": "running", "elapsed_s": clock() - started})
        return result

    search_settings = _search_settings(config)
    live = _open_live_metrics(config, console, out_dir)
    try:
        outcome = search(
            one_step, search_settings, clock, lambda probes: points.knee_bracket([p.row for p in probes])
        )
    finally:
        if live is not None:
            live.close()
    document.update(_points(config, steps, outcome, peak.requests_per_s))
    document["elapsed_s"] = clock() - started
    write_capacity(out_dir, document)
    return document


def _document(
    settings: dict, window: Window, warmup_start: int, warmup_requests: int, peak: Peak, steps: list
) -> dict:
    """capacity.json's document before the first step: the settings, the window, its warm-up and the
    production peak; `steps` is the list the search appends each step's row to."""
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "settings": settings,
        "window": _window_row(window),
        "warmup": {
            "start_s": warmup_start / 1e9,
            "length_s": (window.start_ns - warmup_start) / 1e9,
            "requests": warmup_requests,
        },
        "production_peak": {
            "start_s": peak.start_ns / 1e9,
            "requests_per_s": peak.requests_per_s,
            "output_tokens_per_s": peak.output_tokens_per_s,
        },
        "steps": steps,
    }


def _search_settings(config: CapacityConfig) -> SearchSettings:
    """The search's bounds from the command's config (its budget in seconds)."""
    return SearchSettings(
        start_factor=config.start_factor,
        precision=config.precision,
        max_factor=config.max_factor,
        budget_s=config.budget_ns / 1e9,
        max_steps=config.max_steps,
    )


def _open_live_metrics(config: CapacityConfig, console, out_dir: Path):
    """The live metrics server of --observe, opened once: one server for every step; None without
    --observe."""
    from replayer.coordinator import open_live_metrics

    live = open_live_metrics(config.replay.observe, console, config.replay.quiet)
    if live is not None:
        live.fixed_run = out_dir.name  # one series across the steps; the load factor says which
    return live


def _window_row(window: Window) -> dict:
    return {
        "start_s": window.start_ns / 1e9,
        "end_s": window.end_ns / 1e9,
        "length_s": window.length_ns / 1e9,
        "requests": window.requests,
        "whole_trace": window.whole_trace,
    }


def _points(config: CapacityConfig, steps: list[dict], outcome, peak_rps: float) -> dict:
    limit = points.slo_limit(steps, outcome.confirmed, outcome.last_pass, outcome.first_fail)
    point = points.operating_point(limit, config.headroom_target)
    room = points.headroom(limit, peak_rps)
    bound = next((s for s in steps if s["client_bound"]), None)
    return {
        "knee": points.knee(steps),
        "slo_limit": limit,
        "operating_point": point,
        "headroom": room,
        "bottleneck": points.bottleneck(steps, limit),
        "cost": points.cost(steps, point, config.gpu_hour_cost, config.gpus),
        "client_bound": None
        if bound is None
        else {
            "step": bound["index"],
            "factor": bound["factor"],
            "reason": bound["client_bound_reason"],
            "advice": CLIENT_ADVICE,
        },
        "stop_reason": outcome.stop_reason,
        "verdict": points.verdict(limit, room, config.require_headroom, outcome.stop_reason),
    }
