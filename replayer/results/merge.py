"""The workers' spooled outcomes -> results.parquet (ResultRow), after the loops have stopped.

The tokenizer for answers without usage is loaded here, and only when some answer needs one.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from llmreplay.output_paths import publish, temp_path
from llmreplay.run_format import OUTCOME_COPIED, RESULT_SCHEMA, TRACE_COPIED, ResultRow, result_table
from llmreplay.sse import SSESplitter
from llmreplay.wire.message_text import message_text
from llmreplay.wire.response import counted_texts, summarize_json, summarize_stream
from llmreplay.wire.usage import parse_usage
from replayer.loop.request_file import RequestFields, read_fields, tail_body
from replayer.loop.result_spool import outcome_of, read_spool
from replayer.loop.runner import Sent
from replayer.plan.arrays import PlanArrays
from replayer.plan.phases import Phases, split_copy
from replayer.plan.schedule import sent_name
from replayer.plan.trace_rows import TraceRows
from replayer.results.sorted_rows import SortedResultsWriter, bucket_bounds

ROWS_PER_BATCH = 2_000  # rows become Arrow this many at a time: a row with its chunk offsets is a few KB


@dataclass(frozen=True, slots=True)
class WorkerPart:
    """One worker's hand-off files and the plans its results refer to by index."""

    worker: int
    results_path: Path  # replayer.loop.result_spool file; absent when the worker never finished
    fields_path: Path
    tails_path: Path
    plans: PlanArrays


class SentRequests:
    """What was sent for a worker's requests: its fields, and a body read back only when asked for."""

    def __init__(self, fields: RequestFields, tails_path: Path):
        self.fields = fields
        self._tails_path = tails_path

    def body(self, index: int) -> bytes:
        offset, length = self.fields.span(index)
        with open(self._tails_path, "rb") as handle:
            handle.seek(offset)
            return tail_body(handle.read(length))


def merge_worker_results(
    parts: Sequence[WorkerPart],
    trace: TraceRows,
    start_ns: int | None,
    tokenizer: str | None,
    path: Path,
    spill_dir: Path,
    phases: Phases | None = None,
) -> int:
    """Write every worker's results to `path` (results.parquet), sorted by schedule; returns the rows.
    `trace`: the trace rows plan.record_index refers to. Holds a batch of rows and one bucket of the
    sort at a time (replayer.results.sorted_rows), not the run.

    A worker that never started or died leaves no results file: its requests are simply absent.
    `phases`: which plans are warm-up and which soak loop each is in (None: neither)."""
    count_tokens = _LazyTokenCounter(tokenizer)
    clock = RunClock.now(start_ns or 0)
    bounds = bucket_bounds(part.plans.scheduled_offset_ns for part in parts)
    writer = SortedResultsWriter(path, RESULT_SCHEMA, bounds, spill_dir)
    try:
        for part in parts:
            if not part.results_path.exists():
                continue
            built = SentRequests(read_fields(part.fields_path), part.tails_path)
            for batch in _sent_batches(part):
                records = trace.records([item.plan.record_index for item in batch])
                rows = result_rows(batch, records, built, part.worker, clock, count_tokens, phases)
                writer.write(result_table(rows))
        writer.close()
    except BaseException:
        writer.abort()
        raise
    return writer.rows


def _sent_batches(part: WorkerPart) -> Iterator[list[Sent]]:
    """A worker's spooled results as Sent, about ROWS_PER_BATCH at a time."""
    batch: list[Sent] = []
    for frame in read_spool(part.results_path):
        for values in frame:
            out = outcome_of(values)
            batch.append(Sent(part.plans[values[0]], values[1], out, shed=out is None))
        if len(batch) >= ROWS_PER_BATCH:
            yield batch
            batch = []
    if batch:
        yield batch


class _LazyTokenCounter:
    """Loads the tokenizer the first time an answer without usage needs it (seldom: servers report usage)."""

    def __init__(self, tokenizer: str | None):
        self._tokenizer = tokenizer
        self._count: Callable[[str], int] | None = None

    def __call__(self, text: str) -> int:
        if self._count is None:
            from llmreplay.tokenizers import load_tokenizer

            self._count = load_tokenizer(self._tokenizer).count
        return self._count(text)


@dataclass(frozen=True, slots=True)
class RunClock:
    """The run's offset 0 and one reading of both clocks, to turn a monotonic send time into wall time."""

    start_ns: int  # perf_counter_ns of the schedule's offset 0
    anchor_unix_ns: int
    anchor_mono_ns: int

    @classmethod
    def now(cls, start_ns: int) -> RunClock:
        return cls(start_ns, time.time_ns(), time.perf_counter_ns())

    def unix_us(self, mono_ns: int) -> int:
        return (self.anchor_unix_ns + (mono_ns - self.anchor_mono_ns)) // 1000


def result_rows(
    sent: Sequence[Sent],
    records: Sequence[dict],
    built: SentRequests,
    worker: int,
    clock: RunClock,
    count_tokens=None,
    phases: Phases | None = None,
) -> list[ResultRow]:
    """One row per request; `records[i]`: the trace row of `sent[i]` (a dict of its columns);
    `count_tokens(text) -> int` fills in counts the server did not report."""
    rows = []
    for item, record in zip(sent, records, strict=True):
        row = _planned(item, record, built.fields, worker, clock, phases or Phases())
        if item.shed:
            row.error_kind = "shed_by_client"
        else:
            _measured(row, item, built, clock, count_tokens)
        rows.append(row)
    return rows


def _planned(
    item: Sent, record: dict, fields: RequestFields, worker: int, clock: RunClock, phases: Phases
) -> ResultRow:
    """The row as far as the plan, the trace and the request sent tell it."""
    plan = item.plan
    session_id = record["session_id"]
    loop, copy = split_copy(plan.copy_index, phases.loop_stride)
    return ResultRow(
        **{name: record[name] for name in TRACE_COPIED},
        request_id=sent_name(record["request_id"], plan.copy_index, phases.loop_stride),
        session_id=None if session_id is None else sent_name(session_id, plan.copy_index, phases.loop_stride),
        model=fields.model(plan.index),
        source_request_id=record["request_id"],
        copy_index=copy,
        loop=loop,
        warmup=loop == 0 and plan.record_index < phases.first_measured_record,
        worker=worker,
        scheduled_offset_ns=plan.scheduled_offset_ns,
        session_wait_ns=max(0, item.due_ns - (clock.start_ns + plan.scheduled_offset_ns)),
        recorded_prompt_tokens=record["prompt_tokens"],
        recorded_completion_tokens=record["completion_tokens"],
        recorded_model=record["model"],
        requested_completion_tokens=fields.requested(plan.index),
    )


def _measured(row: ResultRow, item: Sent, built: SentRequests, clock: RunClock, count_tokens) -> None:
    out = item.outcome
    for name in OUTCOME_COPIED:
        setattr(row, name, getattr(out, name))
    if out.error_kind is not None:
        row.error_detail = out.error_detail  # scrubbed by the worker's spool
    row.sent_offset_ns = out.sent_ns - clock.start_ns
    row.dispatch_lag_ns = out.sent_ns - item.due_ns
    row.sent_time = clock.unix_us(out.sent_ns)
    usage = out.usage
    if usage is not None:
        counts = parse_usage(usage)  # every API's usage, normalised (Anthropic: input + cache reads/writes)
        row.prompt_tokens = counts.prompt_tokens
        row.completion_tokens = counts.completion_tokens
        row.cached_tokens = counts.cached_tokens
        row.cache_write_tokens = counts.cache_write_tokens
        row.token_source = "server_usage"
    elif out.response_text_bytes is not None and count_tokens is not None:
        index = item.plan.index
        row.prompt_tokens = count_tokens(prompt_text(built.body(index)))
        texts = response_texts(out.response_text_bytes, built.fields.streams[index])
        row.completion_tokens = sum(count_tokens(text) for text in texts if text)
        row.token_source = "tokenizer"


def prompt_text(body: bytes) -> str:
    """The text the prompt is made of (each message's counted text, joined), for the tokenizer fallback."""
    obj = orjson.loads(body)
    if "messages" in obj:
        return "".join(message_text(message)[1] for message in obj["messages"])
    prompt = obj.get("prompt", obj.get("input", ""))
    return prompt if isinstance(prompt, str) else json.dumps(prompt)


def response_texts(raw: Sequence[bytes], stream: bool) -> tuple[str, ...]:
    """The texts of a raw SSE stream or JSON body that its completion tokens are counted over."""
    if not stream:
        try:
            return counted_texts(summarize_json(b"".join(raw), "chat_completions"))
        except ValueError:
            return ()
    splitter = SSESplitter()
    payloads = [p for chunk in raw for p in splitter.feed(chunk)] + splitter.finish()
    return counted_texts(summarize_stream([(0, payload) for payload in payloads]))


def _json_or_none(data: bytes):
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    return obj if isinstance(obj, dict) else None


def write_parquet_atomic(path: Path, table: pa.Table) -> None:
    """Write under a temporary name, then publish: the file exists only when complete."""
    tmp = temp_path(path)
    try:
        pq.write_table(table, tmp, compression="zstd")
        publish(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
