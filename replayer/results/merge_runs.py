"""The shards of one multi-host replay merged into one run: raw rows concatenated on a common wall-clock
base (host and shard columns added), every statistic recomputed from them, the hosts' clock bounds kept.

Never a merge of percentiles. Refuses (one line) runs that are not shards of the same replay.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from llmreplay.errors import BadInput
from llmreplay.run_format import RESULT_SCHEMA, RESULTS_FILE, RUN_FILE, RunCounts, RunInfo, read_run

# Settings every shard of one replay shares (the schedule, the target's model choice, the lengths).
SAME_SETTINGS = ("schedule", "model", "model_map", "engine", "fit_lengths", "duration_ns", "responses_state")
CLOCK_BUDGET_SHARE = 0.10  # of the merged schedule's median inter-arrival, unless --clock-budget


@dataclass(frozen=True, slots=True)
class ShardRunInput:
    path: Path
    table: pa.Table
    info: RunInfo  # its run.json, typed at the version edge (llmreplay.run_format.read_run)
    shard: int
    shards: int

    @property
    def host(self) -> str:
        return self.info.machine.hostname or f"shard-{self.shard}"


def load_shard_runs(paths: list[str]) -> list[ShardRunInput]:
    """Each run directory's results and run.json, refused unless they are distinct shards of one replay."""
    runs = []
    for text in paths:
        path = Path(text)
        results = path / RESULTS_FILE
        if not results.is_file():
            raise BadInput(f"merge {path}: no {RESULTS_FILE} (not a run directory)")
        run = read_run(results, "merge")
        if run.info is None:
            raise BadInput(f"merge {path}: no {RUN_FILE} beside {RESULTS_FILE} (not a finished replay)")
        shard = (run.info.config.get("multihost") or {}).get("shard")
        if not (isinstance(shard, list) and len(shard) == 2 and all(isinstance(v, int) for v in shard)):
            raise BadInput(f"merge {path}: not a shard of a multi-host replay (it ran without --shard K/N)")
        runs.append(ShardRunInput(path, run.table, run.info, shard[0], shard[1]))
    _check_same_replay(runs)
    return sorted(runs, key=lambda r: r.shard)


def missing_shards(runs: list[ShardRunInput]) -> list[int]:
    return sorted(set(range(runs[0].shards)) - {r.shard for r in runs})


def merged_table(runs: list[ShardRunInput]) -> tuple[pa.Table, int]:
    """All rows on one time base (offset 0 = the earliest shard's start), with host and shard; returns
    the table and that base (unix ns)."""
    base = min(_start_unix_ns(r) for r in runs)
    parts = []
    for run in runs:
        shift = _start_unix_ns(run) - base
        table = run.table
        for name in ("scheduled_offset_ns", "sent_offset_ns"):
            index = table.schema.get_field_index(name)
            table = table.set_column(index, name, pc.add(table.column(name), pa.scalar(shift, pa.int64())))
        n = table.num_rows
        table = table.set_column(
            table.schema.get_field_index("host"), "host", pa.array([run.host] * n, pa.string())
        )
        table = table.set_column(
            table.schema.get_field_index("shard"), "shard", pa.array([run.shard] * n, pa.int16())
        )
        parts.append(table.cast(RESULT_SCHEMA))
    merged = pa.concat_tables(parts)
    order = pc.sort_indices(merged, [("scheduled_offset_ns", "ascending"), ("shard", "ascending")])
    return merged.take(order), base


def clock_section(runs: list[ShardRunInput], merged: pa.Table, budget_ns: int | None) -> dict:
    """The hosts' clocks as they measured them, the cross-host error bound and whether it is within budget.

    A host's bound is its offset against the barrier's clock (plus half the round trip), the worse of arm
    and end; two hosts can differ by at most the sum of their bounds. Unmeasured: flagged."""
    hosts = []
    for run in runs:
        clock = run.info.clock or {}
        readings = [clock.get(moment) or {} for moment in ("arm", "end")]
        offsets = [r.get("offset") for r in readings if isinstance(r.get("offset"), dict)]
        bound = max((int(o["bound_ns"]) for o in offsets), default=None)
        kernel = next((r.get("kernel") for r in readings if r.get("kernel")), None)
        if (
            bound is None and kernel and kernel.get("synchronized")
        ):  # no barrier: the kernel's bound on true time
            bound = int(kernel["maxerror_us"]) * 1000
        hosts.append(
            {
                "shard": run.shard,
                "host": run.host,
                "start_unix_ns": _start_unix_ns(run),
                "offset_ns": [int(o["offset_ns"]) for o in offsets],
                "bound_ns": bound,
                "kernel": kernel,
            }
        )
    bounds = sorted((h["bound_ns"] for h in hosts if h["bound_ns"] is not None), reverse=True)
    measured = len(bounds) == len(hosts)
    if len(hosts) == 1:
        cross = bounds[0] if bounds else None
    else:
        cross = sum(bounds[:2]) if measured else None
    budget = budget_ns if budget_ns is not None else _default_budget_ns(merged)
    within = cross is not None and (budget is None or cross <= budget)
    return {
        "hosts": hosts,
        "cross_host_bound_ns": cross,
        "budget_ns": budget,
        "within_budget": within,
        "note": None
        if measured
        else "a host's clock error is unknown: no --start-barrier to measure it against, and no time daemon "
        "synchronizing its kernel clock",
    }


def _default_budget_ns(merged: pa.Table) -> int | None:
    due = np.sort(np.asarray(merged.column("scheduled_offset_ns").to_numpy(zero_copy_only=False), np.int64))
    gaps = np.diff(due)
    gaps = gaps[gaps > 0]
    return int(statistics.median(gaps.tolist()) * CLOCK_BUDGET_SHARE) if gaps.size else None


def _start_unix_ns(run: ShardRunInput) -> int:
    start = run.info.start_unix_ns
    if not isinstance(start, int):
        raise BadInput(f"merge {run.path}: the run never started (no start_unix_ns in run.json)")
    return start


def _check_same_replay(runs: list[ShardRunInput]) -> None:
    first = runs[0]
    seen: dict[int, Path] = {}
    for run in runs:
        if run.shards != first.shards:
            raise BadInput(f"merge {run.path}: shard of {run.shards} hosts, {first.path} of {first.shards}")
        if run.shard in seen:
            raise BadInput(f"merge {run.path}: shard {run.shard} given twice (also {seen[run.shard]})")
        seen[run.shard] = run.path
        for name in SAME_SETTINGS:
            mine, theirs = (r.info.config.get(name) for r in (run, first))
            if mine != theirs:
                raise BadInput(f"merge {run.path}: --{name.replace('_', '-')} differs from {first.path}'s")
        if run.info.trace_fingerprint != first.info.trace_fingerprint:
            raise BadInput(f"merge {run.path}: replayed another trace than {first.path}")


def write_merged_run(
    runs: list[ShardRunInput], out_dir: Path, budget_ns: int | None, allow_missing: bool
) -> tuple[dict, dict]:
    """results.parquet and run.json of the merged run in `out_dir` (made here); returns its summary
    and clock section."""
    from llmreplay.run_format import write_run_info

    missing = _refuse_missing_shards(runs, allow_missing)
    table, base_unix_ns = merged_table(runs)
    clock = clock_section(runs, table, budget_ns)
    _write_results(table, out_dir)
    counts = _merged_counts([r.info.counts for r in runs])
    stop_reason = _worst_stop_reason([r.info.stop_reason for r in runs], bool(missing))
    summary = _merged_summary(out_dir / RESULTS_FILE, runs[0].info, counts, stop_reason)
    info = _merged_run_info(runs, counts, stop_reason, summary, clock, base_unix_ns)
    write_run_info(out_dir, info)
    return summary, clock


def _refuse_missing_shards(runs: list[ShardRunInput], allow_missing: bool) -> list[int]:
    """The shards absent from `runs`; refused (one line) unless --allow-missing-shards."""
    missing = missing_shards(runs)
    if missing and not allow_missing:
        raise BadInput(
            f"merge: shards {', '.join(map(str, missing))} of {runs[0].shards} are missing "
            "(pass --allow-missing-shards to merge the others; the run is then incomplete)"
        )
    return missing


def _write_results(table: pa.Table, out_dir: Path) -> None:
    """The merged rows as `out_dir`/results.parquet, published whole (a temp file, then a rename)."""
    import pyarrow.parquet as pq

    from llmreplay.output_paths import publish, temp_path

    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = temp_path(out_dir / RESULTS_FILE)
    pq.write_table(table, tmp)
    publish(tmp, out_dir / RESULTS_FILE)


def _merged_counts(shards: list[RunCounts]) -> dict[str, int]:
    """The run's counts: the trace's from the first shard (every shard read it), the rest summed."""
    counts = {name: getattr(shards[0], name) for name in _SHARED_COUNTS}
    return counts | {name: sum(getattr(c, name) for c in shards) for name in _SHARD_COUNTS}


def _merged_summary(results: Path, first: RunInfo, counts: dict[str, int], stop_reason: str) -> dict:
    """The summary recomputed from the merged rows, with the first shard's limits and stated load."""
    from llmreplay.run_format import stated_load
    from replayer.judge.gate_limits import FidelityLimits
    from replayer.judge.trace_cache import run_trace_cache
    from replayer.results.summary import summarize_file

    config = first.config
    limits = (
        FidelityLimits(**config["limits"]) if isinstance(config.get("limits"), dict) else FidelityLimits()
    )
    return summarize_file(
        results,
        limits,
        float(config.get("max_error_rate", 0.01)),
        never_attempted=counts["not_sent"],
        stop_reason=stop_reason,
        trace=run_trace_cache(first),
        load=stated_load(first),
    )


def _merged_run_info(
    runs: list[ShardRunInput],
    counts: dict[str, int],
    stop_reason: str,
    summary: dict,
    clock: dict,
    base_unix_ns: int,
) -> RunInfo:
    """run.json of the merged run: the first shard's settings, the widest bounds, every worker and
    host; no monotonic start and no server metrics (each host had its own clock and scrape)."""
    from llmreplay.run_format import RunMachine

    infos = [r.info for r in runs]
    first = infos[0]
    return RunInfo(
        config={**first.config, "multihost": {**first.config.get("multihost", {}), "shard": None}},
        target=first.target,
        trace=first.trace,
        tokenizer=first.tokenizer,
        versions=first.versions,
        machine=RunMachine.this_one(),
        started_unix_ns=min(i.started_unix_ns for i in infos),
        ended_unix_ns=max(i.ended_unix_ns for i in infos),
        start_unix_ns=base_unix_ns,
        start_mono_ns=None,  # each host had its own monotonic clock
        stop_reason=stop_reason,
        build_s=max(i.build_s for i in infos),
        workers=[{**w, "shard": r.shard, "host": r.host} for r in runs for w in r.info.workers],
        coordinator_max_rss_mb=max(i.coordinator_max_rss_mb for i in infos),
        builder={"per_shard": [i.builder for i in infos]},
        counts=RunCounts(**counts),
        idle_removed_s=first.idle_removed_s,
        schedule_span_s=max(i.schedule_span_s for i in infos),
        server_metrics=None,  # each host scraped the same endpoint: see the shards' own runs
        summary=summary,
        preflight=first.preflight,
        phases=first.phases,
        trace_fingerprint=first.trace_fingerprint,
        clock=clock,
        hosts=[
            {
                "shard": r.shard,
                "host": r.host,
                "run_dir": str(r.path),
                "verdict": (r.info.summary.get("verdict") or {}).get("headline"),
            }
            for r in runs
        ],
    )


_SHARED_COUNTS = ("trace_rows", "window_rows")  # the whole trace's: every shard read it
_SHARD_COUNTS = ("planned", "unsupported_endpoint", "to_send", "sent", "not_sent")  # each shard's own


def _worst_stop_reason(reasons: list, incomplete: bool) -> str:
    if incomplete or any(r not in ("completed", "duration") for r in reasons):
        return "interrupted" if not incomplete else "incomplete"
    return "duration" if "duration" in reasons else "completed"
