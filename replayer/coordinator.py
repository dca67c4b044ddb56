"""The parent process of a replay: plan, start the workers, show progress, scrape server metrics,
merge the workers' results into one run directory. Never on a latency-critical path itself.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import platform
import signal
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from llmreplay import __version__
from llmreplay.errors import BadInput
from llmreplay.run_format import RESULTS_FILE, RUN_FILE, RUN_FORMAT_VERSION, SERVER_METRICS_FILE
from replayer.config import ReplayConfig
from replayer.loop.http_pool import parse_endpoint
from replayer.loop.process_memory import peak_rss_mb
from replayer.loop.result_spool import partial_path
from replayer.loop.runner import USER_AGENT, LoopSettings
from replayer.loop.worker import STAT_SLOTS, WorkerJob, worker_main
from replayer.plan.arrays import int64_array
from replayer.plan.bounds import check_prompt_sizes, check_span, within_duration
from replayer.plan.prepare import BuildJob, Prepared, Shard, prepare_bodies
from replayer.plan.request_builder import ENDPOINT_PATHS, BuildOptions
from replayer.plan.schedule import build_schedule, schedule_input
from replayer.plan.sessions import link_sessions, session_codes, shard_by_session
from replayer.plan.trace_rows import TraceRows, read_trace_rows
from replayer.results.merge import WorkerPart, merge_worker_results, write_json_atomic
from replayer.results.summary import summarize_file
from replayer.target import normalise_base_url, probe_metrics, probe_target

PARTS_DIR = ".parts"
EXIT_GRACE_S = 10.0  # beyond the configured grace, before a stuck worker is killed


@dataclass(frozen=True, slots=True)
class RunOutcome:
    run_dir: Path
    summary: dict
    exit_code: int  # 0 ok, 1 the run's verdict failed (replayer.results.summary: unfaithful, interrupted, errors)


def _check_models_served(
    trace: TraceRows, planned: np.ndarray, served: tuple[str, ...], override: str | None, base_url: str
) -> None:
    """Refuse before the clock starts when the target does not serve the trace's models.

    Staging often names the model differently from production; replaying anyway would only
    measure 404s. `planned`: the trace row of every planned request.
    """
    if override is not None or not served:
        return
    models = trace.table.column("model").take(pa.array(planned))
    unserved = pc.drop_null(models.filter(pc.invert(pc.is_in(models, pa.array(served)))))
    asked = pc.value_counts(unserved).to_pylist()
    if asked:
        top = max(asked, key=lambda item: item["counts"])
        raise BadInput(
            f"--target {base_url}: does not serve model '{top['values']}' ({top['counts']} requests of the trace "
            f"ask for it; it serves {', '.join(served)}); pass --model NAME to send every request to one model"
        )


def _refuse_used_run_dir(run_dir: Path) -> None:
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


def run_replay(config: ReplayConfig, console=None) -> RunOutcome:
    run_dir = Path(config.run_dir)
    _refuse_used_run_dir(run_dir)
    if config.workers < 1:
        raise BadInput(f"--workers {config.workers}: must be at least 1")
    if config.max_inflight < config.workers:
        raise BadInput(f"--max-inflight {config.max_inflight}: must be at least --workers")
    base_url = normalise_base_url(config.target_url)
    trace = read_trace_rows(config.trace_path)
    rows = schedule_input(trace.table)
    schedule = build_schedule(rows, config.schedule)
    endpoints = trace.table.column("endpoint")
    supported = np.asarray(pc.is_in(endpoints, pa.array(list(ENDPOINT_PATHS))).to_numpy(zero_copy_only=False))
    plans = schedule.take(supported[schedule.record_index])
    planned, unsupported = len(schedule), len(schedule) - len(plans)
    window_rows, idle_removed_ns, span_ns = (
        schedule.source_rows,
        schedule.idle_removed_ns,
        schedule.trace_span_ns,
    )
    del schedule
    plans, beyond_duration = within_duration(plans, config.duration_ns)  # never built, never sent
    if not len(plans):
        raise BadInput(f"{config.trace_path}: no request to replay in the selected window")
    check_span(plans, config.duration_ns, str(config.trace_path))
    check_prompt_sizes(trace.table, plans.record_index, str(config.trace_path))
    target = probe_target(base_url, config.engine, config.api_key)
    if config.server_metrics_url:
        probe_metrics(config.server_metrics_url, config.api_key)
    _check_models_served(trace, plans.record_index, target.models, config.model, base_url)
    build = BuildOptions(
        engine=target.engine,
        model=config.model,
        default_model=target.models[0] if target.models else None,
        seed=config.schedule.seed,
    )
    run_dir.mkdir(parents=True, exist_ok=True)
    parts = run_dir / PARTS_DIR
    try:
        parts.mkdir()  # claims the directory: a replay started into it since the check fails here
    except FileExistsError:
        _refuse_used_run_dir(run_dir)
        raise
    jobs, shards = _jobs(config, plans, trace, rows, base_url, parts)
    synthesis = not trace.has_content[plans.record_index].all()
    to_send = len(plans)
    del rows, plans  # the jobs hold each worker's plans

    build_job = BuildJob(
        str(config.trace_path),
        tuple(shards),
        build,
        trace.meta.block_size,
        config.tokenizer,
        config.session_header,
        synthesis,
    )

    def prepare() -> Prepared:
        return prepare_bodies(build_job)

    started_unix_ns = time.time_ns()
    info = _run_workers(config, jobs, prepare, console)
    if beyond_duration and info["stop_reason"] == "completed":
        info["stop_reason"] = "duration"  # the plans past --duration were dropped before the run
    ended_unix_ns = time.time_ns()
    result_rows = merge_worker_results(
        [
            WorkerPart(j.worker, Path(j.results_path), Path(j.fields_path), Path(j.tails_path), j.plans)
            for j in jobs
        ],
        trace,
        info["start_mono_ns"],
        config.tokenizer,
        run_dir / RESULTS_FILE,
        parts,
    )
    for job in jobs:
        for path in (job.results_path, partial_path(Path(job.results_path)), job.tails_path, job.fields_path):
            Path(path).unlink(missing_ok=True)
    parts.rmdir()
    summary = summarize_file(  # the run's verdict: the checks `report` makes of it
        run_dir / RESULTS_FILE,
        config.limits,
        config.max_error_rate,
        never_attempted=to_send - result_rows,
        stop_reason=info["stop_reason"],
    )
    if info["scraper"] is not None:
        info["scraper"].write(run_dir / SERVER_METRICS_FILE)
    run_json = {
        "run_format_version": RUN_FORMAT_VERSION,
        "config": config.public_dict(),
        "target": {
            "base_url": base_url,
            "engine": target.engine,
            "engine_from": target.detected_from,
            "models": list(target.models),
        },
        "trace": {
            "path": str(config.trace_path),
            "files": [str(f) for f in trace.files],
            "meta": dataclasses.asdict(trace.meta),
        },
        "tokenizer": config.tokenizer or "mistral-tekken",
        "versions": _versions(),
        "machine": {
            "hostname": socket.gethostname(),
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
        },
        "started_unix_ns": started_unix_ns,
        "ended_unix_ns": ended_unix_ns,
        "start_unix_ns": info["start_unix_ns"],
        "start_mono_ns": info["start_mono_ns"],  # time.perf_counter_ns() of offset 0 (this machine)
        "stop_reason": info["stop_reason"],
        "build_s": info["build_s"],
        "workers": info["workers"],  # per worker: event-loop CPU seconds, peak RSS
        "coordinator_max_rss_mb": peak_rss_mb(),
        "builder": info["builder"],  # bodies: seconds, peak RSS, in the coordinator or its own process
        "counts": {
            "trace_rows": len(trace),
            "window_rows": window_rows,
            "planned": planned,
            "unsupported_endpoint": unsupported,
            "to_send": to_send,  # planned, supported and within --duration
            "sent": summary["sent"],
            "not_sent": to_send - result_rows,  # never attempted: the run stopped before their time
        },
        "idle_removed_s": idle_removed_ns / 1e9,
        "schedule_span_s": span_ns / 1e9,
        "server_metrics": info["scraper_info"],
        "summary": summary,
    }
    write_json_atomic(run_dir / RUN_FILE, run_json)
    return RunOutcome(
        run_dir,
        {
            **summary,
            "run": run_json["counts"],
            "idle_removed_s": run_json["idle_removed_s"],
            "stop_reason": info["stop_reason"],
        },
        summary["verdict"]["exit_code"],
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
    headers.extend(config.headers)
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


def _run_workers(config: ReplayConfig, jobs: list[WorkerJob], prepare, console) -> dict:
    """Start the workers (their imports overlap with `prepare`, which writes their bodies), then
    load, start together, watch, collect.

    Workers die with this process (replayer.loop.parent_watch): each gets the read end of a liveness
    pipe whose write end only we hold (in `alive`, never written, closed once they are gone), and
    on Linux a parent-death signal, which fires when the thread that started the worker ends: this
    one, which stays here until every worker has exited."""
    context = multiprocessing.get_context("spawn")
    procs, pipes, stats, alive = [], [], [], []
    for job in jobs:
        parent_end, child_end = context.Pipe()
        alive_r, alive_w = context.Pipe(duplex=False)
        shared = context.Array("q", len(STAT_SLOTS), lock=False)
        proc = context.Process(
            target=worker_main,
            args=(job, child_end, shared, alive_r, os.getpid()),
            name=f"llmreplay-worker-{job.worker}",
        )
        proc.start()
        child_end.close()
        alive_r.close()
        procs.append(proc)
        pipes.append(parent_end)
        stats.append(shared)
        alive.append(alive_w)
    interrupted = {"flag": False}

    def on_signal(signum, frame):
        interrupted["flag"] = True
        for proc in procs:
            if proc.is_alive() and proc.pid:
                os.kill(proc.pid, signal.SIGTERM)

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    scraper = None
    try:
        try:
            prepared = prepare()
        except BaseException:
            _tell(pipes, ("stop",))
            raise
        if interrupted["flag"]:
            _tell(pipes, ("stop",))
            return _finish(procs, pipes, None, prepared, (None, None), "interrupted", config)
        _tell(pipes, ("load",))
        load_s = _await_ready(pipes, procs, interrupted)
        prepared = dataclasses.replace(prepared, build_s=prepared.build_s + load_s)
        if interrupted["flag"]:
            _tell(pipes, ("stop",))
            return _finish(procs, pipes, None, prepared, (None, None), "interrupted", config)
        start_ns = time.perf_counter_ns() + config.start_delay_ns
        start_unix_ns = time.time_ns() + config.start_delay_ns
        if config.server_metrics_url:
            from replayer.results.server_metrics import MetricsScraper

            scraper = MetricsScraper(
                config.server_metrics_url, config.server_metrics_interval_ns, start_ns, config.api_key
            )
            scraper.start()
        for pipe in pipes:
            pipe.send(("start", start_ns))
        _watch(procs, stats, jobs, config, console, start_ns, interrupted)
        return _finish(procs, pipes, scraper, prepared, (start_unix_ns, start_ns), None, config)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for proc in procs:
            if proc.is_alive():
                proc.kill()
                proc.join(5)
        for end in alive:
            end.close()


def _tell(pipes, message: tuple) -> None:
    for pipe in pipes:
        try:
            pipe.send(message)
        except (BrokenPipeError, OSError):
            pass  # that worker is gone already; _finish reports what the others did


def _await_ready(pipes, procs, interrupted) -> float:
    build_s = 0.0
    for pipe, proc in zip(pipes, procs, strict=True):
        while not pipe.poll(0.1):
            if not proc.is_alive():
                raise RuntimeError(f"worker {proc.name} exited with {proc.exitcode} while preparing")
        message = pipe.recv()
        if message[0] == "error":
            for p in procs:
                p.kill()
            if message[2]:
                raise BadInput(message[1].removeprefix("BadInput: "))
            raise RuntimeError(f"worker {proc.name} failed while preparing: {message[1]}")
        build_s = max(build_s, message[1])
    return build_s


def _watch(procs, stats, jobs, config, console, start_ns, interrupted) -> None:
    from replayer.progress import Progress

    total = sum(len(j.plans) for j in jobs)
    progress = None if config.quiet or console is None else Progress(console, total, jobs)
    # The workers end the run themselves by duration + grace (replayer.loop.runner); one that has not
    # exited EXIT_GRACE_S after its bound (of the duration, or of an interrupt) is killed.
    margin_ns = config.grace_ns + round(EXIT_GRACE_S * 1e9)
    kill_at_ns = None if config.duration_ns is None else start_ns + config.duration_ns + margin_ns
    noticed = False
    try:
        while any(p.is_alive() for p in procs):
            now_ns = time.perf_counter_ns()
            if progress is not None:
                progress.update(stats, (now_ns - start_ns) / 1e9)
            if interrupted["flag"] and not noticed:
                noticed = True
                bound_ns = now_ns + margin_ns
                kill_at_ns = bound_ns if kill_at_ns is None else min(kill_at_ns, bound_ns)
            if kill_at_ns is not None and now_ns > kill_at_ns:
                for proc in procs:
                    proc.kill()
            for proc in procs:
                proc.join(0.25 / len(procs))
    finally:
        if progress is not None:
            progress.close(stats, (time.perf_counter_ns() - start_ns) / 1e9)


def _run_stop_reason(reasons: list[str]) -> str:
    """The run's stop reason from its workers': an interrupt wins, then the end of --duration."""
    for reason in ("interrupted", "duration"):
        if reason in reasons:
            return reason
    return "completed"


def _finish(procs, pipes, scraper, prepared: Prepared, start, stop_reason, config) -> dict:
    reasons, workers = [], []
    for proc, pipe in zip(procs, pipes, strict=True):
        proc.join(config.grace_ns / 1e9 + EXIT_GRACE_S)
        if pipe.poll(0):
            message = pipe.recv()
            if message[0] == "done":
                reasons.append(message[1]["stop_reason"])
                workers.append(message[1])
    if scraper is not None:
        scraper.stop()
    scraper_info = None
    if scraper is not None:
        scraper_info = {
            "url": config.server_metrics_url,
            "scrapes": scraper.scrapes,
            "failures": scraper.failures,
            "last_error": scraper.last_error,
        }
    reason = stop_reason or _run_stop_reason(reasons)
    return {
        "build_s": round(prepared.build_s, 3),
        "builder": {"peak_rss_mb": prepared.peak_rss_mb, "in_process": prepared.in_process},
        "start_unix_ns": start[0],
        "start_mono_ns": start[1],
        "stop_reason": reason,
        "workers": workers,
        "scraper": scraper,
        "scraper_info": scraper_info,
    }
