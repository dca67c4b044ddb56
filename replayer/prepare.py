"""Request bodies of every worker, built before the workers load them and before the clock starts.

The only replay code that may load the tokenizer (prompt synthesis for shape-only rows). When it
is needed, building runs in a short-lived process, so neither the workers nor the coordinator
carry the tokenizer's memory through the run. Bodies reach the workers as one file per worker of
two pickles of plain lists: the small per-request fields, then the bodies, so the merge after the
run reads the bodies only when it must (unpickling imports nothing, so a worker never loads
pyarrow or the tokenizer).
"""

from __future__ import annotations

import os
import pickle
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the worker imports this module for read_shard_requests: keep it light
    from llmreplay.trace_format import TraceRecord
    from replayer.request_builder import BuildOptions
    from replayer.schedule import PlannedRequest


@dataclass(frozen=True, slots=True)
class Shard:
    """What one worker's bodies are built from; `path` is where they are written."""

    plans: tuple[PlannedRequest, ...]  # linked, indices local to the worker
    records: dict[int, TraceRecord]
    path: str


@dataclass(frozen=True, slots=True)
class ShardRequests:
    """What was built for a worker's requests, by plan index; `bodies` only when asked for."""

    paths: list[str]
    streams: list[bool]
    requested_tokens: list[int | None]
    models: list[str]
    bodies: list[bytes] | None


def needs_synthesis(shards: Sequence[Shard]) -> bool:
    return any(
        r.content_messages is None and r.content_prompt is None for s in shards for r in s.records.values()
    )


@dataclass(frozen=True, slots=True)
class Prepared:
    build_s: float
    peak_rss_mb: float  # of the process that built the bodies
    in_process: bool  # False: a short-lived process of its own (the tokenizer was needed)


def prepare_bodies(
    shards: Sequence[Shard], build: BuildOptions, block_size: int, tokenizer: str | None
) -> Prepared:
    """Write every shard's bodies. Raises BadInput for rows it cannot build."""
    if not needs_synthesis(shards):
        return write_bodies(shards, build, block_size, tokenizer)
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(1, mp_context=context, initializer=_ignore_sigint) as pool:
        return pool.submit(write_bodies, tuple(shards), build, block_size, tokenizer).result()


def write_bodies(
    shards: Sequence[Shard], build: BuildOptions, block_size: int, tokenizer: str | None
) -> Prepared:
    from replayer.process_memory import peak_rss_mb
    from replayer.request_builder import build_request

    started = time.perf_counter()
    speller = _speller(tokenizer, block_size) if needs_synthesis(shards) else None
    for shard in shards:
        built, models = [], []
        for plan in shard.plans:
            record = shard.records[plan.record_index]
            built.append(build_request(record, plan, build, speller))
            models.append(build.model or record.model or build.default_model)
        fields = {
            "paths": [b.path for b in built],
            "streams": [b.stream for b in built],
            "requested_tokens": [b.requested_completion_tokens for b in built],
            "models": models,
        }
        dump_pickle_atomic(Path(shard.path), fields, [b.body for b in built])
    return Prepared(time.perf_counter() - started, peak_rss_mb(), speller is None)


def read_shard_requests(path: str | Path, with_bodies: bool) -> ShardRequests:
    """A worker's built requests: the worker needs the bodies, the merge seldom does."""
    with open(path, "rb") as handle:  # our own file, written moments ago by this run
        fields = pickle.load(handle)
        bodies = pickle.load(handle) if with_bodies else None
    return ShardRequests(
        fields["paths"], fields["streams"], fields["requested_tokens"], fields["models"], bodies
    )


def _ignore_sigint() -> None:
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the coordinator's to handle


def _speller(tokenizer: str | None, block_size: int):
    from replayer.prompt_synthesis import BlockSpeller, ExactTextWords

    return BlockSpeller(ExactTextWords(tokenizer), block_size)


def dump_pickle_atomic(path: Path, *values) -> None:
    """A hand-off file between the run's processes (one pickle per value, read back in order):
    complete under its name, or absent."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as handle:
            for value in values:
                pickle.dump(value, handle, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
