"""The worker processes of a run: started while the bodies are built, loaded, started together, watched
(progress, interrupts, a bound on the run), their reports collected. They never outlive this process.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import signal
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from llmreplay.errors import BadInput
from replayer.config import ReplayConfig
from replayer.launch.start import arm_start, end_clock
from replayer.loop.worker import STAT_SLOTS, WorkerJob, worker_main
from replayer.plan.prepare import Prepared

if TYPE_CHECKING:
    from replayer.results.server_metrics import MetricsScraper
    from replayer.target import TargetInfo

EXIT_GRACE_S = 10.0  # beyond the configured grace, before a stuck worker is killed


@dataclass(frozen=True, slots=True)
class Execution:
    """What the workers' run reported: its clocks, why it stopped, the processes' figures."""

    started_unix_ns: int
    ended_unix_ns: int
    start_unix_ns: int | None
    start_mono_ns: int | None
    stop_reason: str
    build_s: float
    builder: dict
    workers: list[dict]
    scraper: MetricsScraper | None
    scraper_info: dict | None
    clock: dict | None = None  # a multi-host run's host clock at arm and end (replayer.launch.start)


class _Workers:
    """The worker processes, the parent's ends of their pipes, their live counters; SIGINT/SIGTERM stop them.

    Workers die with this process (replayer.loop.parent_watch): each gets the read end of a liveness
    pipe whose write end only we hold (in `alive`, never written, closed once they are gone), and on
    Linux a parent-death signal, which fires when the thread that started the worker ends: this one,
    which stays in run_workers until every worker has exited."""

    def __init__(self, jobs: list[WorkerJob]):
        context = multiprocessing.get_context("spawn")
        self.procs, self.pipes, self.stats, self.alive = [], [], [], []
        self.interrupted = False
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
            self.procs.append(proc)
            self.pipes.append(parent_end)
            self.stats.append(shared)
            self.alive.append(alive_w)

    def on_signal(self, signum, frame) -> None:
        self.interrupted = True
        for proc in self.procs:
            if proc.is_alive() and proc.pid:
                os.kill(proc.pid, signal.SIGTERM)

    def tell(self, message: tuple) -> None:
        for pipe in self.pipes:
            try:
                pipe.send(message)
            except (BrokenPipeError, OSError):
                pass  # that worker is gone already; _finish reports what the others did

    def reap(self) -> None:
        """Kill whichever worker is still there, and let go of the liveness pipes."""
        for proc in self.procs:
            if proc.is_alive():
                proc.kill()
                proc.join(5)
        for end in self.alive:
            end.close()


def run_workers(
    config: ReplayConfig, jobs: list[WorkerJob], prepare, console, target: TargetInfo, live=None
) -> Execution:
    """Start the workers (their imports overlap with `prepare`, which writes their bodies), then
    load, start together, watch, collect; `target.metrics_url` is scraped meanwhile, and `live` (a
    replayer.observe.live.LiveMetrics) serves their progress from the start to the end."""
    started_unix_ns = time.time_ns()
    workers = _Workers(jobs)
    previous = {sig: signal.signal(sig, workers.on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        return _drive(config, jobs, workers, prepare, console, started_unix_ns, target, live)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        workers.reap()
        if live is not None:
            live.detach()


def _drive(
    config: ReplayConfig,
    jobs,
    workers: _Workers,
    prepare,
    console,
    started_unix_ns: int,
    target: TargetInfo,
    live=None,
) -> Execution:
    try:
        prepared = prepare()
    except BaseException:
        workers.tell(("stop",))
        raise
    if not workers.interrupted:
        workers.tell(("load",))
        load_s = _await_ready(workers)
        prepared = dataclasses.replace(prepared, build_s=prepared.build_s + load_s)
    if workers.interrupted:
        workers.tell(("stop",))
        return _finish(workers, None, prepared, (started_unix_ns, None, None), "interrupted", config)
    try:
        armed = arm_start(config.multihost, config.start_delay_ns)  # a shared start may wait at the barrier
    except BaseException:
        workers.tell(("stop",))
        raise
    start_ns, start_unix_ns = armed.start_mono_ns, armed.start_unix_ns
    scraper = _start_scraper(config, target, start_ns)
    for pipe in workers.pipes:
        pipe.send(("start", start_ns))
    if live is not None:
        live.attach(workers.stats, [j.results_path for j in jobs], sum(len(j.plans) for j in jobs))
    _watch(workers, jobs, config, console, start_ns)
    execution = _finish(workers, scraper, prepared, (started_unix_ns, start_unix_ns, start_ns), None, config)
    return dataclasses.replace(execution, clock=end_clock(config.multihost, armed.clock_arm))


def _start_scraper(config: ReplayConfig, target: TargetInfo, start_ns: int) -> MetricsScraper | None:
    if not target.metrics_url:
        return None
    from llmreplay.engines import BY_NAME
    from replayer.results.server_metrics import MetricsScraper

    names = BY_NAME[target.engine].metrics
    interval_ns = config.server_metrics_interval_ns
    scraper = MetricsScraper(
        target.metrics_url, interval_ns, start_ns, config.api_key, names, target.metrics_from
    )
    scraper.start()
    return scraper


def _await_ready(workers: _Workers) -> float:
    """The longest worker load; returns early once SIGINT/SIGTERM came (the workers it stopped may
    close their pipes mid-load: that is the interrupt, not a failure)."""
    build_s = 0.0
    for pipe, proc in zip(workers.pipes, workers.procs, strict=True):
        while not pipe.poll(0.1):
            if workers.interrupted:
                return build_s
            if not proc.is_alive():
                raise RuntimeError(f"worker {proc.name} exited with {proc.exitcode} while preparing")
        try:
            message = pipe.recv()
        except (EOFError, OSError):
            if workers.interrupted:
                return build_s
            raise RuntimeError(f"worker {proc.name} closed its pipe while preparing") from None
        if message[0] == "error":
            for p in workers.procs:
                p.kill()
            if message[2]:
                raise BadInput(message[1].removeprefix("BadInput: "))
            raise RuntimeError(f"worker {proc.name} failed while preparing: {message[1]}")
        build_s = max(build_s, message[1])
    return build_s


def _watch(workers: _Workers, jobs, config, console, start_ns) -> None:
    from replayer.progress import Progress

    procs, stats = workers.procs, workers.stats
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
            if workers.interrupted and not noticed:
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


def _last_word(pipe) -> tuple | None:
    """The worker's waiting report, or None: none sent, or it closed its pipe first (stopped mid-load)."""
    try:
        return pipe.recv() if pipe.poll(0) else None
    except (EOFError, OSError):
        return None


def _finish(workers: _Workers, scraper, prepared: Prepared, start, stop_reason, config) -> Execution:
    """Collect the workers' reports; `start`: (started_unix_ns, start_unix_ns, start_mono_ns)."""
    reasons, reports = [], []
    for proc, pipe in zip(workers.procs, workers.pipes, strict=True):
        proc.join(config.grace_ns / 1e9 + EXIT_GRACE_S)
        message = _last_word(pipe)
        if message is not None:
            if message[0] == "done":
                reasons.append(message[1]["stop_reason"])
                reports.append(message[1])
    scraper_info = None
    if scraper is not None:
        scraper.stop()
        scraper_info = scraper.info()
    return Execution(
        started_unix_ns=start[0],
        ended_unix_ns=time.time_ns(),
        start_unix_ns=start[1],
        start_mono_ns=start[2],
        stop_reason=stop_reason or _run_stop_reason(reasons),
        build_s=round(prepared.build_s, 3),
        builder={
            "peak_rss_mb": prepared.peak_rss_mb,
            "in_process": prepared.in_process,
            "prompt_fit": prepared.fit,
            "responses_state": prepared.responses_state,
        },
        workers=reports,
        scraper=scraper,
        scraper_info=scraper_info,
    )
