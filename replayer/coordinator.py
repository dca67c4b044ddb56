"""The parent process of a replay: check, plan, run the workers (progress, server metrics), merge, write
run.json. Never on a latency-critical path: the workers time the requests, it only waits for them.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from llmreplay import __version__
from llmreplay.count_units import trace_count_units
from llmreplay.errors import BadInput
from llmreplay.run_format import (
    RESULTS_FILE,
    RUN_FILE,
    SERVER_METRICS_FILE,
    RunCounts,
    RunInfo,
    RunMachine,
    RunTarget,
    RunTrace,
    write_run_info,
)
from llmreplay.tokenizers import DEFAULT_TOKENIZER
from replayer.config import SERVER_METRICS_OFF, ReplayConfig
from replayer.judge.trace_cache import read_trace_cache
from replayer.loop.http_pool import parse_endpoint
from replayer.loop.process_memory import peak_rss_mb
from replayer.loop.result_spool import partial_path
from replayer.loop.runner import USER_AGENT, LoopSettings
from replayer.loop.worker import WorkerJob
from replayer.observe.live import open_live_metrics  # capacity's door to it too
from replayer.plan.arrays import int64_array
from replayer.plan.bounds import check_prompt_sizes, check_span, within_duration
from replayer.plan.host_shards import select_shard, trace_fingerprint
from replayer.plan.phases import Phases, completed_loops
from replayer.plan.prepare import BuildJob, Shard, prepare_bodies
from replayer.plan.request_builder import ENDPOINT_PATHS, BuildOptions, sent_model
from replayer.plan.schedule import Schedule, ScheduleInput, build_schedule, schedule_input
from replayer.plan.sessions import link_sessions, session_codes, shard_by_session
from replayer.plan.trace_rows import TraceRows, read_trace_rows
from replayer.preflight import Preflight, preflight_target
from replayer.results.merge import WorkerPart, merge_worker_results
from replayer.results.summary import summarize_file
from replayer.target import TargetInfo, normalise_base_url, probe_target, with_server_metrics
from replayer.target_tokenizer import (
    AUTO,
    TokenizerChoice,
    choose_tokenizer,
    engine_tokenizer_choice,
    unprobed_choice,
)
from replayer.worker_processes import Execution, run_workers

PARTS_DIR = ".parts"


@dataclass(frozen=True, slots=True)
class RunOutcome:
    run_dir: Path
    summary: dict
    exit_code: (
        int  # 0 ok, 1 the run's verdict failed (replayer.results.summary: unfaithful, interrupted, errors)
    )


@dataclass(frozen=True, slots=True)
class Planned:
    """The requests a run will send, and what was left out on the way there."""

    trace: TraceRows
    rows: ScheduleInput
    plans: Schedule  # planned, supported and within --duration
    window_rows: int
    planned: int
    unsupported_endpoint: int
    beyond_duration: int  # plans past --duration: never built, never sent
    idle_removed_ns: int
    span_ns: int
    phases: Phases = Phases()  # warm-up and --soak loops
    shard_plan: dict | None = None  # --shard K/N: the split of the sessions (replayer.plan.host_shards)


@dataclass(frozen=True, slots=True)
class Ready:
    """Everything the run needs once planning is done: the workers' jobs and the bodies to build."""

    trace: TraceRows
    target: TargetInfo
    lengths: TokenizerChoice | None  # how prompts are spelled and counted for the target
    parts: Path
    jobs: list[WorkerJob]
    build_job: BuildJob
    counts: dict[str, int]  # RunCounts' planning fields
    beyond_duration: int
    idle_removed_ns: int
    span_ns: int
    phases: Phases = Phases()
    shard_plan: dict | None = None


def run_replay(config: ReplayConfig, console=None, live=None) -> RunOutcome:
    """Check, plan, execute, merge, write the run info; nothing is sent before every check has passed.
    `live`: a replayer.observe.live.LiveMetrics serving this run (capacity's, across its steps); None:
    this run's own when --metrics-port asks for one. --pushgateway/--remote-write once the run is written."""
    owned = open_live_metrics(config.observe, console, config.quiet) if live is None else None
    try:
        outcome = _replay(config, console, live or owned)
    finally:
        if owned is not None:
            owned.close()
    if config.observe.pushes:
        from llmreplay.prometheus.push import push_run

        push_run(outcome.run_dir, config.observe, console)
    return outcome


def _replay(config: ReplayConfig, console, live) -> RunOutcome:
    """The run itself; `live` (or None) is told its labels once the target is known."""
    run_dir = Path(config.run_dir)
    base_url = _check_config(config, run_dir)
    planned = _plan(config)
    target = _check_target(config, base_url, planned)
    preflight = preflight_target(config, target, planned.trace.table, planned.plans.record_index, console)
    lengths = _prompt_lengths(config, planned, target, console)
    _note_short_warmup(planned.phases, config, console)
    if target.metrics_warning and console is not None and not config.quiet:  # once every check has passed
        console.print(f"warning: {target.metrics_warning}", markup=False, highlight=False, soft_wrap=True)
    if live is not None:
        live.watch(config, target)
    claim = _claim(run_dir)
    try:
        ready = _ready(config, planned, target, lengths, claim.parts)
        del planned  # the jobs hold each worker's plans
        execution = _execute(config, ready, console, live)
    except BadInput:  # refused before the clock started (a header, the barrier, a late start)
        claim.release()
        raise
    result_rows = _merge(config, ready, execution, run_dir)
    summary = summarize_file(  # the run's verdict: the checks `report` makes of it
        run_dir / RESULTS_FILE,
        config.limits,
        config.max_error_rate,
        never_attempted=ready.counts["to_send"] - result_rows,
        stop_reason=execution.stop_reason,
        trace=read_trace_cache(config.trace_path),  # production's cache hits, against the run's
        load={"speed": config.schedule.speed, "scale": config.schedule.scale},
    )
    if execution.scraper is not None:
        execution.scraper.write(run_dir / SERVER_METRICS_FILE)
    summary = {
        **summary,
        **_phase_summary(run_dir, ready),
        "prompt_lengths": _prompt_length_report(run_dir, ready, config.trace_path),
    }
    info = _run_info(config, ready, execution, summary, result_rows, preflight)
    info = dataclasses.replace(info, phases=_phases_info(ready, run_dir))
    write_run_info(run_dir, info)
    return _outcome(run_dir, info)


def _check_config(config: ReplayConfig, run_dir: Path) -> str:
    """What can be refused before the trace is read; returns the target's base URL."""
    refuse_used_run_dir(run_dir)
    if config.multihost.start_barrier is not None:  # unreachable: refused before anything is written
        from replayer.launch.barrier import check_barrier

        check_barrier(config.multihost.start_barrier)
    if config.workers < 1:
        raise BadInput(f"--workers {config.workers}: must be at least 1")
    if config.max_inflight < config.workers:
        raise BadInput(f"--max-inflight {config.max_inflight}: must be at least --workers")
    if config.model is not None and config.model_map:
        raise BadInput("--model and --model-map: give one (--model NAME sends every request to NAME)")
    return normalise_base_url(config.target_url)


def _plan(config: ReplayConfig) -> Planned:
    """The trace's requests on the run's clock, less those no endpoint sends and those past --duration."""
    trace = read_trace_rows(config.trace_path)
    rows = schedule_input(trace.table)
    schedule = build_schedule(rows, config.schedule)
    schedule, shard_plan = select_shard(  # --shard K/N: this host's whole sessions only
        schedule,
        trace.table.column("session_id"),
        config.multihost.shard,
        config.schedule.seed,
        config.workers,
    )
    endpoints = trace.table.column("endpoint")
    supported = np.asarray(pc.is_in(endpoints, pa.array(list(ENDPOINT_PATHS))).to_numpy(zero_copy_only=False))
    keep = supported[schedule.record_index]
    planned, window_rows = len(schedule), schedule.source_rows
    idle_removed_ns, span_ns = schedule.idle_removed_ns, schedule.trace_span_ns
    phases = schedule.phases
    plans = schedule.take(keep)
    del schedule
    plans, beyond_duration = within_duration(plans, config.duration_ns)  # never built, never sent
    if not len(plans):
        raise BadInput(f"{config.trace_path}: no request to replay in the selected window")
    check_span(plans, config.duration_ns, str(config.trace_path))
    check_prompt_sizes(trace.table, plans.record_index, str(config.trace_path))
    unsupported = planned - int(keep.sum())
    return Planned(
        trace,
        rows,
        plans,
        window_rows,
        planned,
        unsupported,
        beyond_duration,
        idle_removed_ns,
        span_ns,
        phases,
        shard_plan,
    )


def _check_target(config: ReplayConfig, base_url: str, planned: Planned) -> TargetInfo:
    """Probe the target (and the metrics endpoint) and refuse models it does not serve."""
    target = probe_target(base_url, config.engine, config.api_key)
    target = with_server_metrics(target, config.server_metrics_url, SERVER_METRICS_OFF, config.api_key)
    _check_models_served(planned.trace, planned.plans.record_index, target.models, config, base_url)
    return target


def _prompt_lengths(
    config: ReplayConfig, planned: Planned, target: TargetInfo, console
) -> TokenizerChoice | None:
    """How prompts will be spelled for the target (replayer.target_tokenizer); None: recorded content only."""
    trace = planned.trace
    synthesis = config.fit_lengths or not trace.has_content[planned.plans.record_index].all()
    model = sent_model(None, config.model, config.model_map, target.models[0] if target.models else None)
    if config.skip_preflight:  # nothing beyond /v1/models is asked of the target
        choice = unprobed_choice(config.tokenizer) if synthesis else None
    elif synthesis:
        choice = choose_tokenizer(config.tokenizer, target.base_url, model, config.api_key)
    else:  # recorded content is only measured, by the target's own tokenizer when it has one
        choice = engine_tokenizer_choice(target.base_url, model, config.api_key)
    if choice is not None and console is not None and not config.quiet:
        console.print(f"prompt lengths: {choice.note}")
        units = trace_count_units(trace.table, trace.meta.tokenizer).note() if synthesis else None
        if units is not None:
            console.print(f"warning: {units}", markup=False, highlight=False, soft_wrap=True)
    return choice


@dataclass(frozen=True, slots=True)
class Claim:
    """The run directory's `.parts/` (0700: the request bodies in it are the trace's content), and the
    directories this run created for it, removed again when the run is refused before its clock starts."""

    parts: Path
    created: tuple[Path, ...]  # innermost first

    def release(self) -> None:
        """Remove `.parts/` and whatever directory the claim created, so the next replay may use -o."""
        import shutil

        shutil.rmtree(self.parts, ignore_errors=True)
        for directory in self.created:
            try:
                directory.rmdir()  # only while empty
            except OSError:
                break


def _claim(run_dir: Path) -> Claim:
    """Make the run directory and its `.parts/`: a replay started into it since the check fails here."""
    created = []
    for directory in (run_dir, *run_dir.parents):
        if directory.exists():
            break
        created.append(directory)
    run_dir.mkdir(parents=True, exist_ok=True)
    parts = run_dir / PARTS_DIR
    try:
        parts.mkdir(mode=0o700)
    except FileExistsError:
        refuse_used_run_dir(run_dir)
        raise
    parts.chmod(0o700)  # whatever the umask: nobody else reads the bodies
    return Claim(parts, tuple(created))


def _ready(
    config: ReplayConfig, planned: Planned, target: TargetInfo, lengths: TokenizerChoice | None, parts: Path
) -> Ready:
    """The workers' jobs (their plans, by session) and the job that builds their request bodies."""
    trace, plans = planned.trace, planned.plans
    jobs, shards = _jobs(config, plans, trace, planned.rows, target.base_url, parts)
    build = BuildOptions(
        engine=target.engine,
        model=config.model,
        default_model=target.models[0] if target.models else None,
        seed=config.schedule.seed,
        fit_lengths=config.fit_lengths,
        model_map=config.model_map,
        responses_state=config.responses_state,
        loop_stride=planned.phases.loop_stride,
        soak_keep_sharing=planned.phases.soak_keep_sharing,
    )
    synthesis = config.fit_lengths or not trace.has_content[plans.record_index].all()
    build_job = BuildJob(
        str(config.trace_path),
        tuple(shards),
        build,
        trace.meta.block_size,
        lengths.spec if lengths is not None else _local_tokenizer(config),
        config.session_header,
        synthesis,
        api_key=config.api_key,
    )
    counts = {
        "trace_rows": len(trace),
        "window_rows": planned.window_rows,
        "planned": planned.planned,
        "unsupported_endpoint": planned.unsupported_endpoint,
        "to_send": len(plans),
    }
    return Ready(
        trace,
        target,
        lengths,
        parts,
        jobs,
        build_job,
        counts,
        planned.beyond_duration,
        planned.idle_removed_ns,
        planned.span_ns,
        planned.phases,
        planned.shard_plan,
    )


def _execute(config: ReplayConfig, ready: Ready, console, live=None) -> Execution:
    """Build the bodies, run the workers to the end; plans dropped past --duration make it 'duration'."""
    prepare = functools.partial(prepare_bodies, ready.build_job)
    execution = run_workers(config, ready.jobs, prepare, console, ready.target, live)
    if ready.beyond_duration and execution.stop_reason == "completed":
        return dataclasses.replace(execution, stop_reason="duration")
    return execution


def _merge(config: ReplayConfig, ready: Ready, execution: Execution, run_dir: Path) -> int:
    """The workers' results into results.parquet, then their hand-off files gone; returns the rows."""
    parts = [
        WorkerPart(j.worker, Path(j.results_path), Path(j.fields_path), Path(j.tails_path), j.plans)
        for j in ready.jobs
    ]
    result_rows = merge_worker_results(
        parts,
        ready.trace,
        execution.start_mono_ns,
        _local_tokenizer(config),
        run_dir / RESULTS_FILE,
        ready.parts,
        ready.phases,
    )
    for job in ready.jobs:
        for path in (job.results_path, partial_path(Path(job.results_path)), job.tails_path, job.fields_path):
            Path(path).unlink(missing_ok=True)
    ready.parts.rmdir()
    return result_rows


def _run_info(
    config: ReplayConfig,
    ready: Ready,
    execution: Execution,
    summary: dict,
    result_rows: int,
    preflight: Preflight | None,
) -> RunInfo:
    """run.json's contents, once the results are merged and summarized."""
    target, trace = ready.target, ready.trace
    to_send = ready.counts["to_send"]
    return RunInfo(
        config=config.public_dict(),
        target=RunTarget(target.base_url, target.engine, target.detected_from, list(target.models)),
        trace=RunTrace(str(config.trace_path), [str(f) for f in trace.files], dataclasses.asdict(trace.meta)),
        tokenizer=ready.lengths.spec
        if ready.lengths is not None
        else _local_tokenizer(config) or DEFAULT_TOKENIZER,
        versions=_versions(),
        machine=RunMachine.this_one(),
        started_unix_ns=execution.started_unix_ns,
        ended_unix_ns=execution.ended_unix_ns,
        start_unix_ns=execution.start_unix_ns,
        start_mono_ns=execution.start_mono_ns,
        stop_reason=execution.stop_reason,
        build_s=execution.build_s,
        workers=execution.workers,
        coordinator_max_rss_mb=peak_rss_mb(),
        builder=execution.builder,
        counts=RunCounts(**ready.counts, sent=summary["sent"], not_sent=to_send - result_rows),
        idle_removed_s=ready.idle_removed_ns / 1e9,
        schedule_span_s=ready.span_ns / 1e9,
        server_metrics=execution.scraper_info,
        summary=summary,
        preflight=None if preflight is None else preflight.as_dict(),
        trace_fingerprint=trace_fingerprint(trace.table),
        shard_plan=ready.shard_plan,
        clock=execution.clock,
    )


def _phase_summary(run_dir: Path, ready: Ready) -> dict:
    """The summary's cold start and, after --soak, its drift: what `report` shows of them."""
    from replayer.compare.config import CompareConfig
    from replayer.compare.sides import soak_drift
    from replayer.measured.cold_start import cold_start
    from replayer.measured.side import load_side

    try:
        side = load_side(run_dir, "run")
    except BadInput:  # nothing measured: no section
        return {}
    side = dataclasses.replace(side, config={"target": {"engine": ready.target.engine}})
    drift = soak_drift(side, CompareConfig())
    return {"cold_start": cold_start(side), **({"drift": drift} if drift is not None else {})}


def _prompt_length_report(run_dir: Path, ready: Ready, trace_path) -> dict:
    """Each replayed prompt's length as the target counted it against the recorded one, by layout."""
    import pyarrow.parquet as pq

    from llmreplay.trace_io import iter_trace_batches
    from replayer.results.prompt_lengths import prompt_length_report

    columns = [
        "source_request_id",
        "prompt_tokens",
        "recorded_prompt_tokens",
        "error_kind",
        "http_status",
        "warmup",
    ]
    results = pq.read_table(run_dir / RESULTS_FILE, columns=columns)
    lengths = ready.lengths.as_dict() if ready.lengths is not None else None
    _, batches = iter_trace_batches(trace_path, columns=("request_id", "messages", "tools_count"))
    return prompt_length_report(results, batches, lengths)


def _note_short_warmup(phases: Phases, config: ReplayConfig, console) -> None:
    """Say once that the trace starts too soon for the whole warm-up asked for."""
    if phases.warmup_s < phases.asked_warmup_s and console is not None and not config.quiet:
        console.print(
            f"note: --warmup {phases.asked_warmup_s:g}s: only {phases.warmup_s:g}s of the trace lie before the "
            "measured window; the warm-up is that much shorter",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )


def _phases_info(ready: Ready, run_dir: Path) -> dict:
    """run.json's `phases`: the warm-up, the measured window and the soak loops planned and completed."""
    import pyarrow.parquet as pq

    stride = ready.phases.loop_stride
    copies = np.concatenate([np.frombuffer(job.plans.copy_index, np.int64) for job in ready.jobs])
    planned = copies // stride if stride else np.zeros(len(copies), np.int64)
    done = pq.read_table(run_dir / RESULTS_FILE, columns=["loop"]).column("loop")
    result_loops = np.asarray(done.to_numpy(), dtype=np.int64)
    done = completed_loops(planned, result_loops)
    if ready.beyond_duration and len(planned):  # --duration dropped the rest of the last loop planned
        done = min(done, int(planned.max()))
    return {**ready.phases.as_dict(), "loops_completed": done}


def _local_tokenizer(config: ReplayConfig) -> str | None:
    """The local tokenizer that counts answers without usage after the run (never an engine's)."""
    return None if config.tokenizer in (None, AUTO) else config.tokenizer


def _outcome(run_dir: Path, info: RunInfo) -> RunOutcome:
    """What the CLI prints: the summary with the run's counts and why it stopped."""
    summary = {
        **info.summary,
        "run": dataclasses.asdict(info.counts),
        "idle_removed_s": info.idle_removed_s,
        "stop_reason": info.stop_reason,
    }
    return RunOutcome(run_dir, summary, info.summary["verdict"]["exit_code"])


def _check_models_served(
    trace: TraceRows, planned: np.ndarray, served: tuple[str, ...], config: ReplayConfig, base_url: str
) -> None:
    """Refuse before the clock starts when the target does not serve the models the requests go to
    (the trace's, through --model-map). Staging often names the model differently from production;
    replaying anyway would only measure 404s. `planned`: the trace row of every planned request."""
    if config.model is not None or not served:
        return
    unserved: dict[str, int] = {}  # by the name sent; `recorded`: a recorded name sent as it
    recorded: dict[str, str] = {}
    for item in pc.value_counts(trace.table.column("model").take(pa.array(planned))).to_pylist():
        sent = sent_model(item["values"], None, config.model_map, None)
        if sent is not None and sent not in served:
            unserved[sent] = unserved.get(sent, 0) + item["counts"]
            recorded.setdefault(sent, item["values"] or "*")
    if unserved:
        name = max(unserved, key=unserved.__getitem__)
        raise BadInput(
            f"--target {base_url}: does not serve model '{name}' ({unserved[name]} requests of the trace "
            f"ask for it; it serves {', '.join(served)}); pass --model-map {recorded[name]}=NAME to send "
            "them to another model, or --model NAME to send every request to one model"
        )


def refuse_used_run_dir(run_dir: Path) -> None:
    """One run per directory: refuse one holding a run, or the `.parts/` of a replay that was killed
    (or is running), before anything is built or sent; mixing two runs' files cannot be merged."""
    held = [name for name in (RESULTS_FILE, RUN_FILE) if (run_dir / name).exists()]
    if held:
        raise BadInput(
            f"-o {run_dir}: already holds a run ({', '.join(held)}); "
            f"choose a new -o directory, or delete {' and '.join(held)} from it"
        )
    if (run_dir / PARTS_DIR).exists():
        raise BadInput(
            f"-o {run_dir}: holds {PARTS_DIR}/, the leftovers of a replay that was killed (or is still "
            f"running); choose a new -o directory, or delete {run_dir / PARTS_DIR}"
        )


def _versions() -> dict:
    import httptools
    import uvloop

    return {
        "llmreplay": __version__,
        "python": sys.version.split()[0],
        "httptools": httptools.__version__,
        "uvloop": uvloop.__version__,
        "pyarrow": pa.__version__,
    }


def _jobs(config, plans, trace, rows, base_url, parts) -> tuple[list[WorkerJob], list[Shard]]:
    headers = [("User-Agent", f"{USER_AGENT}/{__version__}"), ("Content-Type", "application/json")]
    if config.api_key:
        headers.append(("Authorization", f"Bearer {config.api_key}"))
    headers.extend(config.sent_headers)
    per_worker_inflight = max(1, config.max_inflight // config.workers)
    settings = LoopSettings(
        endpoint=parse_endpoint(base_url),
        start_ns=0,
        max_inflight=per_worker_inflight,
        duration_ns=config.duration_ns,
        grace_ns=config.grace_ns,
        connect_timeout_ns=config.connect_timeout_ns,
        read_timeout_ns=config.read_timeout_ns,
        early_wake_ns=config.early_wake_ns,
        warm_connections=config.warm_connections,
    )
    jobs, shards = [], []
    codes = session_codes(trace.table.column("session_id"))
    for worker, positions in enumerate(shard_by_session(plans, rows.session_keys, config.workers)):
        linked = link_sessions(plans, positions, codes, rows.turn_index)
        tails_path = str(parts / f"requests-{worker}.bin")
        fields_path = str(parts / f"requests-{worker}.fields")
        trace_rows = int64_array(trace.row[np.frombuffer(linked.record_index, np.int64)])
        shards.append(Shard(linked, trace_rows, tails_path, fields_path))
        jobs.append(
            WorkerJob(
                worker=worker,
                plans=linked,
                tails_path=tails_path,
                fields_path=fields_path,
                settings=settings,
                headers=tuple(headers),
                results_path=str(parts / f"results-{worker}.marshal"),
            )
        )
    return jobs, shards
