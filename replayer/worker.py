"""A worker process: loads its shard's pre-built bodies, encodes the requests, waits for the shared
start, runs the loop, hands its raw results back. Started by replayer.coordinator; talks over a pipe.

Kept light on purpose (uvloop, httptools, orjson): no pyarrow, no tokenizer, no aiohttp, so its
memory is the bodies plus what the run measures.
"""

from __future__ import annotations

import asyncio
import gc
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from replayer.http_pool import Endpoint, encode_request
from replayer.prepare import dump_pickle_atomic, read_shard_requests
from replayer.process_memory import peak_rss_mb
from replayer.runner import LoopSettings, Runner
from replayer.schedule import PlannedRequest

# Shared int64 slots the coordinator reads for the progress display.
STAT_SLOTS = ("sent", "done", "errors", "shed", "inflight", "lag_p99_ns")
STATS_INTERVAL_S = 0.25


@dataclass(frozen=True, slots=True)
class WorkerJob:
    worker: int
    plans: tuple[PlannedRequest, ...]  # linked by sessions.link_sessions; indices are local
    has_session: tuple[bool, ...]  # by plan index: the trace row has a session id
    bodies_path: str  # written by replayer.prepare before the worker is told to load it
    settings: LoopSettings  # start_ns filled in when the coordinator says go
    headers: tuple[tuple[str, str], ...]  # sent with every request (may include Authorization)
    session_header: str | None
    results_path: str


@dataclass(frozen=True, slots=True)
class WorkerResults:
    """What a worker hands back: (plan index, due_ns, Outcome or None when shed) per request."""

    worker: int
    items: list[tuple]


def encode_requests(
    endpoint: Endpoint,
    plans: Sequence[PlannedRequest],
    paths: Sequence[str],
    bodies: list[bytes | None],
    base_headers: Sequence[tuple[str, str]],
    session_header: str | None,
    has_session: Sequence[bool],
) -> list[bytes]:
    """Every request's bytes, with X-Request-Id (and the session header), before the clock starts.

    Each body is dropped from `bodies` once encoded, so the shard's bodies are in memory once, not twice."""
    out = []
    for plan in plans:
        headers = [*base_headers, ("X-Request-Id", plan.request_id)]
        if session_header and has_session[plan.index]:
            headers.append((session_header, plan.session_key))
        body, bodies[plan.index] = bodies[plan.index], None
        out.append(encode_request(endpoint, "POST", paths[plan.index], headers, body))
    return out


def worker_main(job: WorkerJob, conn, stats) -> None:
    """Process entry. Protocol: <- ("load",) | ("stop",); -> ("ready", s) | ("error", text, bad_input);
    <- ("start", ns) | ("stop",); -> ("done", info)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the coordinator decides; it forwards SIGTERM
    if conn.recv()[0] != "load":
        conn.send(("done", {"worker": job.worker, "stop_reason": "interrupted", "sent": 0}))
        return
    try:
        t0 = time.perf_counter()
        built = read_shard_requests(job.bodies_path, with_bodies=True)
        requests = encode_requests(
            job.settings.endpoint,
            job.plans,
            built.paths,
            built.bodies,
            job.headers,
            job.session_header,
            job.has_session,
        )
        streams = built.streams
        del built  # the encoded requests hold the bodies now
        conn.send(("ready", time.perf_counter() - t0))
    except Exception as exc:  # reported to the coordinator, which turns BadInput into exit 2
        conn.send(("error", f"{type(exc).__name__}: {exc}", type(exc).__name__ == "BadInput"))
        return
    message = conn.recv()
    if message[0] != "start":
        conn.send(("done", {"worker": job.worker, "stop_reason": "interrupted", "sent": 0}))
        return
    runner = Runner(job.plans, requests, streams, replace(job.settings, start_ns=message[1]))
    gc.collect()
    gc.freeze()  # the plans and request bytes live all run: keep the collector from rescanning them
    cpu_before_s = time.process_time()
    _run_loop(runner, stats)
    loop_cpu_s = time.process_time() - cpu_before_s
    items = [(s.plan.index, s.due_ns, s.outcome) for s in runner.results]
    dump_pickle_atomic(Path(job.results_path), WorkerResults(job.worker, items))
    conn.send(
        (
            "done",
            {
                "worker": job.worker,
                "stop_reason": runner.stop_reason,
                "sent": runner.counters.sent,
                "loop_cpu_s": round(loop_cpu_s, 3),
                "max_rss_mb": peak_rss_mb(),
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
