"""A worker process: builds its shard's request bodies, waits for the shared start, runs the loop,
writes its part of the results. Started by replayer.coordinator; talks to it over a pipe.
"""

from __future__ import annotations

import asyncio
import resource
import signal
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

from llmreplay.trace_format import TraceRecord
from replayer.request_builder import BuildOptions, BuiltRequest, build_request
from replayer.results import result_rows, rows_to_table, write_parquet_atomic
from replayer.runner import LoopSettings, Runner
from replayer.schedule import PlannedRequest

# Shared int64 slots the coordinator reads for the progress display.
STAT_SLOTS = ("sent", "done", "errors", "shed", "inflight", "lag_p99_ns")
STATS_INTERVAL_S = 0.25
GIL_SWITCH_INTERVAL_S = 0.0005  # keep the loop's GIL waits short while helper threads run


@dataclass(frozen=True, slots=True)
class WorkerJob:
    worker: int
    plans: tuple[PlannedRequest, ...]  # linked by sessions.link_sessions; indices are local
    records: dict[int, TraceRecord]
    build: BuildOptions
    block_size: int
    tokenizer: str | None
    settings: LoopSettings  # start_ns filled in when the coordinator says go
    headers: tuple[tuple[str, str], ...]  # sent with every request (may include Authorization)
    session_header: str | None
    part_path: str


def build_all(job: WorkerJob) -> tuple[list[BuiltRequest], list[dict[str, str]], list[str]]:
    """Every body, header set and model name of the shard, before the clock starts."""
    speller = _speller(job) if _needs_synthesis(job) else None
    built, headers, models = [], [], []
    base = dict(job.headers)
    for plan in job.plans:
        record = job.records[plan.record_index]
        request = build_request(record, plan, job.build, speller)
        built.append(request)
        h = dict(base)
        h["X-Request-Id"] = plan.request_id
        if job.session_header and record.session_id is not None:
            h[job.session_header] = plan.session_key
        headers.append(h)
        models.append(job.build.model or record.model or job.build.default_model)
    return built, headers, models


def _needs_synthesis(job: WorkerJob) -> bool:
    return any(r.content_messages is None and r.content_prompt is None for r in job.records.values())


def _speller(job: WorkerJob):
    from replayer.prompt_synthesis import BlockSpeller, ExactTextWords

    return BlockSpeller(ExactTextWords(job.tokenizer), job.block_size)


def worker_main(job: WorkerJob, conn, stats) -> None:
    """Process entry. Protocol: -> ("ready", build_s) | ("error", text); <- ("start", ns) | ("stop",);
    -> ("done", info)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the coordinator decides; it forwards SIGTERM
    try:
        t0 = time.perf_counter()
        built, headers, models = build_all(job)
        conn.send(("ready", time.perf_counter() - t0))
    except Exception as exc:  # reported to the coordinator, which turns BadInput into exit 2
        conn.send(("error", f"{type(exc).__name__}: {exc}", type(exc).__name__ == "BadInput"))
        return
    message = conn.recv()
    if message[0] != "start":
        conn.send(("done", {"stop_reason": "interrupted", "sent": 0}))
        return
    settings = replace(job.settings, start_ns=message[1])
    runner = Runner(job.plans, built, headers, settings)
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
    cpu_before_s = time.process_time()
    _run_loop(runner, stats)
    loop_cpu_s = time.process_time() - cpu_before_s
    anchor_unix_ns, anchor_mono_ns = time.time_ns(), time.perf_counter_ns()
    count_tokens = _token_counter(job, runner)
    rows = result_rows(
        runner.results,
        job.records,
        built,
        models,
        job.worker,
        settings.start_ns,
        anchor_unix_ns,
        anchor_mono_ns,
        count_tokens,
    )
    write_parquet_atomic(Path(job.part_path), rows_to_table(rows))
    conn.send(
        (
            "done",
            {
                "worker": job.worker,
                "stop_reason": runner.stop_reason,
                "sent": runner.counters.sent,
                "loop_cpu_s": round(loop_cpu_s, 3),
                "max_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
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


def _token_counter(job: WorkerJob, runner: Runner):
    """The project tokenizer, loaded only when some answer came without usage."""
    if not any(s.outcome is not None and s.outcome.response_text_bytes is not None for s in runner.results):
        return None
    from llmreplay.tokenizers import load_tokenizer

    return load_tokenizer(job.tokenizer).count
