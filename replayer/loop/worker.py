"""A worker process: opens its shard's request file, waits for the shared start, runs the loop, spools
its results to disk as it goes. Started by replayer.coordinator; talks over a pipe. Imports no pyarrow,
tokenizer or aiohttp; memory does not grow with the trace (docs/design/replay-memory.md)."""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import sys
import time
from dataclasses import dataclass, replace
from typing import NoReturn

from llmreplay.redaction import secret_values
from llmreplay.wire.endpoints import dialect_for_path
from replayer.loop.parent_watch import EXIT_ORPHANED, die_with_parent, parent_gone, say_orphaned
from replayer.loop.process_memory import peak_rss_mb
from replayer.loop.request_file import RequestFields, encode_heads, read_fields
from replayer.loop.request_source import RequestSource
from replayer.loop.result_spool import ResultSpool
from replayer.loop.runner import LoopSettings, Runner
from replayer.loop.timer_slack import tighten_timer_slack
from replayer.plan.arrays import PlanArrays

# Shared int64 slots the coordinator reads for the progress display.
STAT_SLOTS = ("sent", "done", "errors", "shed", "inflight", "lag_p99_ns")
STATS_INTERVAL_S = 0.25


@dataclass(frozen=True, slots=True)
class WorkerJob:
    worker: int
    plans: PlanArrays  # linked by sessions.link_sessions; indices are local
    tails_path: str  # written by replayer.plan.prepare before the worker is told to load them
    fields_path: str
    settings: LoopSettings  # start_ns filled in when the coordinator says go
    headers: tuple[tuple[str, str], ...]  # sent with every request (may include Authorization)
    results_path: str  # a replayer.loop.result_spool file, complete once the worker is done


class PathDialects:
    """By plan index, the dialect of the answer (from the request's path): one byte a request."""

    __slots__ = ("_codes", "_names")

    def __init__(self, fields: RequestFields):
        self._codes = fields.path_codes
        self._names = tuple(dialect_for_path(path) for path in fields.paths)

    def __getitem__(self, index: int) -> str:
        return self._names[self._codes[index]]


def open_requests(job: WorkerJob) -> tuple[RequestSource, bytes, PathDialects]:
    """The worker's requests (first window loaded) and, by plan index, which ask for a stream and
    in which dialect the answer comes."""
    fields = read_fields(job.fields_path)
    heads = encode_heads(job.settings.endpoint, fields, job.headers)
    follow_ups = [i for i, follows in enumerate(job.plans.follows_previous) if follows]
    source = RequestSource(job.tails_path, fields, heads, follow_ups)
    source.start()
    return source, fields.streams, PathDialects(fields)


def worker_main(job: WorkerJob, conn, stats, alive, parent_pid: int) -> None:
    """Process entry. Protocol: <- ("load",) | ("stop",); -> ("ready", s) | ("error", text, bad_input);
    <- ("start", ns) | ("stop",); -> ("done", info).

    `alive`: the read end of the coordinator's liveness pipe (EOF once the coordinator is gone);
    `parent_pid`: the coordinator's pid. A worker whose coordinator is gone exits without sending."""
    die_with_parent()
    timer_slack_ns = tighten_timer_slack()  # this thread paces the sends
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the coordinator decides; it forwards SIGTERM
    alive_fd = alive.fileno()
    if parent_gone(parent_pid, alive_fd):  # it died while we were starting: send nothing
        _orphaned(job, parent_pid)
    if _receive(conn, job, parent_pid)[0] != "load":
        _send(conn, _not_started(job), job, parent_pid)
        return
    try:
        t0 = time.perf_counter()
        requests, streams, dialects = open_requests(job)
        ready = ("ready", time.perf_counter() - t0)
    except Exception as exc:  # reported to the coordinator, which turns BadInput into exit 2
        ready = ("error", f"{type(exc).__name__}: {exc}", type(exc).__name__ == "BadInput")
    _send(conn, ready, job, parent_pid)
    if ready[0] == "error":
        return
    message = _receive(conn, job, parent_pid)
    if message[0] != "start":
        requests.close()
        _send(conn, _not_started(job), job, parent_pid)
        return
    spool = ResultSpool(job.results_path, secret_values(job.headers))
    settings = replace(job.settings, start_ns=message[1])
    runner = Runner(job.plans, requests, streams, settings, spool, dialects=dialects)
    gc.collect()
    gc.freeze()  # the plans live all run: keep the collector from rescanning them
    if parent_gone(parent_pid, alive_fd):
        _orphaned(job, parent_pid)
    cpu_before_s = time.process_time()
    _run_loop(runner, stats, alive_fd, lambda: _abandon(runner, job, parent_pid))
    loop_cpu_s = time.process_time() - cpu_before_s
    spool.close()
    requests.close()
    _send(conn, ("done", _done_info(job, runner, requests, loop_cpu_s, timer_slack_ns)), job, parent_pid)


def _done_info(
    job: WorkerJob, runner: Runner, requests: RequestSource, loop_cpu_s: float, timer_slack_ns: int | None
) -> dict:
    """The "done" message's facts, read once the loop has ended and the files are closed: the peak
    RSS and the modules loaded are the whole run's."""
    return {
        "worker": job.worker,
        "stop_reason": runner.stop_reason,
        "sent": runner.counters.sent,
        "cut_after_grace": runner.cut_after_grace,
        "loop_cpu_s": round(loop_cpu_s, 3),
        "timer_slack_ns": timer_slack_ns,
        "stale_resends": runner.stale_resends,
        "max_rss_mb": peak_rss_mb(),
        "requests_read_on_loop": requests.loop_reads,
        "modules_loaded": sorted(m for m in ("pyarrow", "aiohttp", "numpy") if m in sys.modules),
    }


def _not_started(job: WorkerJob) -> tuple:
    return ("done", {"worker": job.worker, "stop_reason": "interrupted", "sent": 0})


def _receive(conn, job: WorkerJob, parent_pid: int) -> tuple:
    """The coordinator's next message; its end of the pipe closing means it is gone."""
    try:
        return conn.recv()
    except (EOFError, OSError):
        _orphaned(job, parent_pid)


def _send(conn, message: tuple, job: WorkerJob, parent_pid: int) -> None:
    try:
        conn.send(message)
    except OSError:  # BrokenPipeError and kin: the coordinator is gone
        _orphaned(job, parent_pid)


def _abandon(runner: Runner, job: WorkerJob, parent_pid: int) -> NoReturn:
    """The liveness pipe hit EOF mid-run (the loop's reader): drop every connection, exit."""
    try:
        runner.abandon()
    finally:
        _orphaned(job, parent_pid)


def _orphaned(job: WorkerJob, parent_pid: int) -> NoReturn:
    """Exit now: no results (nobody would merge them), no cleanup that could block, nothing sent."""
    say_orphaned(job.worker, parent_pid)
    os._exit(EXIT_ORPHANED)


def _run_loop(runner: Runner, stats, alive_fd: int, on_parent_gone) -> None:
    """Run the loop; `on_parent_gone` is called from the loop when the liveness pipe turns readable
    (an fd reader: nothing per request, and it wakes a loop parked before a long idle gap)."""
    import uvloop

    async def main():
        asyncio.get_running_loop().add_reader(alive_fd, on_parent_gone)
        publisher = asyncio.ensure_future(_publish(runner, stats))
        try:
            await runner.run()
        finally:
            publisher.cancel()
            _write_stats(runner, stats)

    uvloop.run(main())


async def _publish(runner: Runner, stats) -> None:
    while True:
        _write_stats(runner, stats)
        await asyncio.sleep(STATS_INTERVAL_S)


def _write_stats(runner: Runner, stats) -> None:
    c = runner.counters
    lags = sorted(c.recent_lags_ns[-1000:])
    p99 = lags[min(len(lags) - 1, int(len(lags) * 0.99))] if lags else 0
    for i, value in enumerate((c.sent, c.done, c.errors, c.shed, c.inflight, p99)):
        stats[i] = value
