"""Loop records -> results.parquet rows (RESULT_SCHEMA), token fallback, atomic file writes.

Runs in the coordinator after the workers' loops have stopped (never on a loop); the tokenizer
for answers without usage is loaded here, and only when some answer needs it.
"""

from __future__ import annotations

import json
import os
import pickle
import time
from collections.abc import Sequence
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from llmreplay.run_format import RESULT_SCHEMA
from llmreplay.sse import SSESplitter
from llmreplay.trace_format import TraceRecord
from replayer.prepare import Shard, ShardRequests, read_shard_requests
from replayer.runner import Sent

ROWS_PER_BATCH = 20_000  # dict rows become Arrow this many at a time: dicts cost ~10x the Arrow row


def merge_worker_results(
    parts: Sequence[tuple[Path, Path, Shard]], start_ns: int | None, tokenizer: str | None
) -> pa.Table:
    """One table from every worker's hand-off file (results, bodies, shard), sorted by schedule.

    A worker that never started or died leaves no file: its requests are simply absent."""
    loaded = []
    for results_path, bodies_path, shard in parts:
        if not results_path.exists():
            continue
        with open(results_path, "rb") as handle:
            handed = pickle.load(handle)  # our own worker's file from this run
        sent = [Sent(shard.plans[i], due, out, shed=out is None) for i, due, out in handed.items]
        loaded.append((handed.worker, sent, shard, bodies_path, _needs_tokenizer(sent)))
    count_tokens = None
    if any(needs for *_, needs in loaded):
        from llmreplay.tokenizers import load_tokenizer

        count_tokens = load_tokenizer(tokenizer).count
    anchor_unix_ns, anchor_mono_ns = time.time_ns(), time.perf_counter_ns()
    tables = [pa.Table.from_pylist([], schema=RESULT_SCHEMA)]
    for worker, sent, shard, bodies_path, needs in loaded:
        built = read_shard_requests(bodies_path, with_bodies=needs)
        for at in range(0, len(sent), ROWS_PER_BATCH):
            rows = result_rows(
                sent[at : at + ROWS_PER_BATCH],
                shard.records,
                built,
                worker,
                start_ns or 0,
                anchor_unix_ns,
                anchor_mono_ns,
                count_tokens,
            )
            tables.append(rows_to_table(rows))
    table = pa.concat_tables(tables)
    order = pc.sort_indices(
        table, sort_keys=[("scheduled_offset_ns", "ascending"), ("request_id", "ascending")]
    )
    return table.take(order)


def _needs_tokenizer(sent: Sequence[Sent]) -> bool:
    """Some answer came without usage: its token counts fall back to the tokenizer (and the body)."""
    return any(s.outcome is not None and s.outcome.response_text_bytes is not None for s in sent)


def result_rows(
    sent: Sequence[Sent],
    records: dict[int, TraceRecord],
    built: ShardRequests,
    worker: int,
    start_ns: int,
    anchor_unix_ns: int,
    anchor_mono_ns: int,
    count_tokens=None,
) -> list[dict]:
    """One dict per request; `count_tokens(text) -> int` fills in counts the server did not report."""
    rows = []
    for item in sent:
        plan = item.plan
        record = records[plan.record_index]
        scheduled_abs = start_ns + plan.scheduled_offset_ns
        row = {
            "request_id": plan.request_id,
            "session_id": _session_id(record, plan.copy_index),
            "turn_index": record.turn_index,
            "parent_request_id": record.parent_request_id,
            "arrival_time": record.arrival_time_us,
            "endpoint": record.endpoint,
            "model": built.models[plan.index],
            "stream": record.stream,
            "tools_count": record.tools_count,
            "tool_choice": record.tool_choice,
            "structured_output": record.structured_output,
            "max_tokens": record.max_tokens,
            "source_request_id": plan.source_request_id,
            "copy_index": plan.copy_index,
            "worker": worker,
            "scheduled_offset_ns": plan.scheduled_offset_ns,
            "session_wait_ns": max(0, item.due_ns - scheduled_abs),
            "recorded_prompt_tokens": record.prompt_tokens,
            "recorded_completion_tokens": record.completion_tokens,
            "requested_completion_tokens": built.requested_tokens[plan.index],
        }
        if item.shed:
            row["error_kind"] = "shed_by_client"
        else:
            _measured(row, item, built, start_ns, anchor_unix_ns, anchor_mono_ns, count_tokens)
        rows.append(row)
    return rows


def _session_id(record: TraceRecord, copy_index: int) -> str | None:
    if record.session_id is None or copy_index == 0:
        return record.session_id
    return f"{record.session_id}#c{copy_index}"


def _measured(row, item: Sent, built: ShardRequests, start_ns, anchor_unix_ns, anchor_mono_ns, count_tokens):
    out = item.outcome
    row.update(
        http_status=out.http_status,
        error_kind=out.error_kind,
        retry_after_ms=out.retry_after_ms,
        tool_calls_count=out.tool_calls_count,
        ttfb_ns=out.ttfb_ns,
        ttft_ns=out.ttft_ns,
        e2e_ns=out.e2e_ns,
        chunk_offsets_ns=None if out.chunk_offsets_ns is None else list(out.chunk_offsets_ns),
        finish_reason=out.finish_reason,
        sent_offset_ns=out.sent_ns - start_ns,
        dispatch_lag_ns=out.sent_ns - item.due_ns,
        sent_time=(anchor_unix_ns + (out.sent_ns - anchor_mono_ns)) // 1000,
    )
    usage = out.usage
    if usage is not None:
        details = usage.get("prompt_tokens_details")
        row.update(
            prompt_tokens=_int(usage.get("prompt_tokens")),
            completion_tokens=_int(usage.get("completion_tokens")),
            cached_tokens=_int(details.get("cached_tokens")) if isinstance(details, dict) else None,
            token_source="server_usage",
        )
    elif out.response_text_bytes is not None and count_tokens is not None and built.bodies is not None:
        index = item.plan.index
        row.update(
            prompt_tokens=count_tokens(prompt_text(built.bodies[index])),
            completion_tokens=count_tokens(response_text(out.response_text_bytes, built.streams[index])),
            token_source="tokenizer",
        )


def _int(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def prompt_text(body: bytes) -> str:
    """The text the prompt is made of (message contents joined), for the tokenizer fallback."""
    obj = orjson.loads(body)
    if "messages" in obj:
        return "\n".join(m["content"] for m in obj["messages"] if isinstance(m.get("content"), str))
    prompt = obj.get("prompt", obj.get("input", ""))
    return prompt if isinstance(prompt, str) else json.dumps(prompt)


def response_text(raw: Sequence[bytes], stream: bool) -> str:
    """Generated text of choice 0 from a raw SSE stream or JSON body."""
    if not stream:
        obj = _json_or_none(b"".join(raw))
        choice = (obj or {}).get("choices", [{}])[0]
        return (choice.get("message") or {}).get("content") or choice.get("text") or ""
    splitter = SSESplitter()
    payloads = [p for chunk in raw for p in splitter.feed(chunk)] + splitter.finish()
    pieces = []
    for payload in payloads:
        obj = _json_or_none(payload)
        for choice in (obj or {}).get("choices") or ():
            delta = choice.get("delta") or choice
            text = delta.get("content") or delta.get("text")
            if isinstance(text, str) and choice.get("index", 0) == 0:
                pieces.append(text)
    return "".join(pieces)


def _json_or_none(data: bytes):
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    return obj if isinstance(obj, dict) else None


def rows_to_table(rows: list[dict]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=RESULT_SCHEMA)


def write_parquet_atomic(path: Path, table: pa.Table) -> None:
    """Write under a temporary name, fsync, rename: the file exists only when complete."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        pq.write_table(table, tmp, compression="zstd")
        with open(tmp, "rb") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_json_atomic(path: Path, data: dict) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        tmp.write_bytes(
            orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS | orjson.OPT_SERIALIZE_NUMPY)
        )
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
