"""A worker process: opens its shard's request file, waits for the shared start, runs the loop,
spools its results to disk as it goes. Started by replayer.coordinator; talks over a pipe.

Kept light on purpose (uvloop, httptools, orjson): no pyarrow, no tokenizer, no aiohttp. Its memory
does not grow with the trace's length beyond its plans (columns, replayer.plan_arrays, ~60 bytes a
request): requests are read a window ahead
(replayer.request_source) and finished requests leave for disk in small batches
(replayer.result_spool).
"""

from __future__ import annotations

import asyncio
import gc
import signal
import sys
import time
from dataclasses import dataclass, replace

from replayer.plan_arrays import PlanArrays
from replayer.process_memory import peak_rss_mb
from replayer.request_file import encode_heads, read_fields
from replayer.request_source import RequestSource
from replayer.result_spool import ResultSpool
from replayer.runner import LoopSettings, Runner

# Shared int64 slots the coordinator reads for the progress display.
STAT_SLOTS = ("sent", "done", "errors", "shed", "inflight", "lag_p99_ns")
STATS_INTERVAL_S = 0.25


@dataclass(frozen=True, slots=True)
class WorkerJob:
    worker: int
    plans: PlanArrays  # linked by sessions.link_sessions; indices are local
    tails_path: str  # written by replayer.prepare before the worker is told to load them
    fields_path: str
    settings: LoopSettings  # start_ns filled in when the coordinator says go
    headers: tuple[tuple[str, str], ...]  # sent with every request (may include Authorization)
    results_path: str  # a replayer.result_spool file, complete once the worker is done


def open_requests(job: WorkerJob) -> tuple[RequestSource, bytes]:
    """The worker's requests (first window loaded) and, by plan index, which ask for a stream."""
    fields = read_fields(job.fields_path)
    heads = encode_heads(job.settings.endpoint, fields, job.headers)
    follow_ups = [i for i, follows in enumerate(job.plans.follows_previous) if follows]
    source = RequestSource(job.tails_path, fields, heads, follow_ups)
    source.start()
    return source, fields.streams


def worker_main(job: WorkerJob, conn, stats) -> None:
    """Process entry. Protocol: <- ("load",) | ("stop",); -> ("ready", s) | ("error", text, bad_input);
    <- ("start", ns) | ("stop",); -> ("done", info)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the coordinator decides; it forwards SIGTERM
    if conn.recv()[0] != "load":
        conn.send(("done", {"worker": job.worker, "stop_reason": "interrupted", "sent": 0}))
        return
    try:
        t0 = time.perf_counter()
        requests, streams = open_requests(job)
        conn.send(("ready", time.perf_counter() - t0))
    except Exception as exc:  # reported to the coordinator, which turns BadInput into exit 2
        conn.send(("error", f"{type(exc).__name__}: {exc}", type(exc).__name__ == "BadInput"))
        return
    message = conn.recv()
    if message[0] != "start":
        requests.close()
        conn.send(("done", {"worker": job.worker, "stop_reason": "interrupted", "sent": 0}))
        return
    spool = ResultSpool(job.results_path)
    runner = Runner(job.plans, requests, streams, replace(job.settings, start_ns=message[1]), spool)
    gc.collect()
    gc.freeze()  # the plans live all run: keep the collector from rescanning them
    cpu_before_s = time.process_time()
    _run_loop(runner, stats)
    loop_cpu_s = time.process_time() - cpu_before_s
    spool.close()
    requests.close()
    conn.send(
        (
            "done",
            {
                "worker": job.worker,
                "stop_reason": runner.stop_reason,
                "sent": runner.counters.sent,
                "loop_cpu_s": round(loop_cpu_s, 3),
                "max_rss_mb": peak_rss_mb(),
                "requests_read_on_loop": requests.loop_reads,
                "modules_loaded": sorted(m for m in ("pyarrow", "aiohttp", "numpy") if m in sys.modules),
            },
        )
    )


def _run_loop(runner: Runner, stats) -> None:
    import uvloop

    async def main():
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
