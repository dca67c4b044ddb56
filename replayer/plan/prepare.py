"""Request files of every worker, built before the workers load them and before the clock starts.
The only replay code that may load the tokenizer, in a short-lived process when it is needed; it
streams records and bodies, holding neither the trace nor the bodies (docs/design/replay-memory.md)."""

from __future__ import annotations

import time
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the worker imports replayer.loop.request_file, not this module; keep it light anyway
    from replayer.plan.arrays import PlanArrays
    from replayer.plan.request_builder import BuildOptions


@dataclass(frozen=True, slots=True)
class Shard:
    """What one worker's requests are built from, and where they are written."""

    plans: PlanArrays  # linked, indices local to the worker
    rows: array  # "q": by plan index, the plan's record's position in the trace's file order
    tails_path: str
    fields_path: str


@dataclass(frozen=True, slots=True)
class Prepared:
    build_s: float
    peak_rss_mb: float  # of the process that built the bodies
    in_process: bool  # False: a short-lived process of its own (the tokenizer was needed)
    fit: dict | None = None  # prompts fitted to the target's count (replayer.plan.prompt_fit.FitStats)
    responses_state: dict | None = None  # chained turns: the mode and how many were chained or expanded


@dataclass(frozen=True, slots=True)
class BuildJob:
    """Everything the builder needs (pickled to its own process when it needs the tokenizer)."""

    trace_path: str
    shards: tuple[Shard, ...]
    build: BuildOptions
    block_size: int
    tokenizer: str | None
    session_header: str | None
    synthesis: bool  # some planned row has no recorded content: prompts are synthesized
    api_key: str | None = field(default=None, repr=False)  # for an engine's /tokenize; never written


def prepare_bodies(job: BuildJob) -> Prepared:
    """Write every shard's request files. Raises BadInput for rows it cannot build."""
    if not job.synthesis:
        return write_requests(job)
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(1, mp_context=context, initializer=_ignore_sigint) as pool:
        return pool.submit(write_requests, job).result()


def write_requests(job: BuildJob) -> Prepared:
    import numpy as np

    from replayer.loop.process_memory import peak_rss_mb
    from replayer.loop.request_file import RequestFileWriter
    from replayer.plan.chained_turns import chained_turns
    from replayer.plan.prompt_fit import PromptFitter
    from replayer.plan.request_builder import build_request
    from replayer.plan.responses_state import PLAIN
    from replayer.plan.schedule import sent_name
    from replayer.plan.trace_rows import stream_records

    started = time.perf_counter()
    shards, build, session_header = job.shards, job.build, job.session_header
    tokenizer = _tokenizer(job) if job.synthesis or _counts_on_target(job.tokenizer) else None
    speller = _speller(tokenizer, job.block_size) if job.synthesis else None
    fitter = PromptFitter(tokenizer) if hasattr(tokenizer, "count_chat") else None
    turns = chained_turns(job.trace_path, shards, build.responses_state)
    writers = [RequestFileWriter(s.tails_path, s.fields_path) for s in shards]
    try:
        rows, shard_of, index_of = _by_row(shards)
        pending: list[dict[int, tuple]] = [{} for _ in shards]
        # (shard, next turn's plan index) -> this turn as sent, which the next continues (plan.sent_turns)
        sent_turns: dict[tuple[int, int], object] = {}
        written = [0] * len(shards)
        at = 0
        for row, record in stream_records(job.trace_path, np.unique(rows)):
            while at < len(rows) and rows[at] == row:
                s, index = int(shard_of[at]), int(index_of[at])
                at += 1
                shard = shards[s]
                plan = shard.plans[index]
                sending = turns.sending(s, index) if turns is not None else 0
                history = turns.history(record) if sending != PLAIN else ()
                previous = sent_turns.pop((s, index), None)
                built = build_request(record, plan, build, speller, fitter, sending, history, previous)
                if plan.next_index is not None and built.turn is not None:
                    sent_turns[(s, plan.next_index)] = built.turn
                headers = [("X-Request-Id", sent_name(record.request_id, plan.copy_index, build.loop_stride))]
                if session_header and record.session_id is not None:
                    headers.append(
                        (session_header, sent_name(record.session_id, plan.copy_index, build.loop_stride))
                    )
                model = build.model_for(record.model)
                pending[s][index] = (
                    built.path, headers, built.body, built.stream, built.requested_completion_tokens, model
                )  # fmt: skip
                while written[s] in pending[s]:
                    writers[s].add(*pending[s].pop(written[s]))
                    written[s] += 1
        for writer in writers:
            writer.close()
    except BaseException:
        for writer in writers:
            writer.abort()
        raise
    fit = fitter.stats.as_dict() if fitter is not None else None
    state = turns.summary if turns is not None else None
    return Prepared(time.perf_counter() - started, peak_rss_mb(), speller is None, fit, state)


def _by_row(shards: Sequence[Shard]):
    """(trace rows, shards, plan indices) of every plan as numpy arrays, in trace order then plan
    order: 24 bytes a plan, where Python tuples would cost about 100."""
    import numpy as np

    rows = np.concatenate([np.frombuffer(s.rows, np.int64) for s in shards] or [np.empty(0, np.int64)])
    shard_of = np.repeat(np.arange(len(shards), dtype=np.int64), [len(s.rows) for s in shards])
    index_of = np.concatenate([np.arange(len(s.rows), dtype=np.int64) for s in shards] or [rows])
    order = np.lexsort((index_of, shard_of, rows))
    return rows[order], shard_of[order], index_of[order]


def _ignore_sigint() -> None:
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the coordinator's to handle


def _counts_on_target(spec: str | None) -> bool:
    """The tokenizer is the target's own: recorded content is counted on it before the clock."""
    from llmreplay.engine_tokenizer import SPEC_PREFIX

    return spec is not None and spec.startswith(SPEC_PREFIX)


def _tokenizer(job: BuildJob):
    """The tokenizer prompts are spelled for: an engine's (over HTTP, with the run's key) or a local one."""
    from llmreplay.engine_tokenizer import SPEC_PREFIX, from_spec
    from llmreplay.tokenizers import load_tokenizer

    if job.tokenizer is not None and job.tokenizer.startswith(SPEC_PREFIX):
        return from_spec(job.tokenizer, job.api_key)
    return load_tokenizer(job.tokenizer)


def _speller(tokenizer, block_size: int):
    from replayer.plan.prompt_synthesis import BlockSpeller, ExactTextWords

    return BlockSpeller(ExactTextWords(tokenizer), block_size)
