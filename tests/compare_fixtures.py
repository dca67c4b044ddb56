"""Synthetic replay runs and traces for the compare tests: real Parquet files, numbers we choose.

Latencies are lognormal around chosen medians; chunk offsets are spaced so that ITL and TPOT
follow from TTFT, E2E and the token count exactly as llmreplay.metrics defines them.
"""

from __future__ import annotations

import datetime
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from llmreplay.run_format import RESULT_SCHEMA, RESULTS_FILE, RUN_FILE, RUN_FORMAT_VERSION
from llmreplay.trace_format import TraceMeta
from llmreplay.trace_io import write_trace

EPOCH_US = 1_750_000_000_000_000  # an arbitrary wall-clock anchor
STATUS_OF_KIND = {"http_5xx": 500, "http_4xx": 400, "rate_limited_429": 429, "shed_by_client": None}


@dataclass(frozen=True)
class Shape:
    """The requests: ids, arrivals and lengths shared by every side built from the same seed."""

    n: int = 400
    seed: int = 7
    interval_ms: float = 20.0
    prompt_median_tokens: float = 665.0
    max_prompt_tokens: int = 30_000

    def arrays(self) -> dict:
        rng = np.random.default_rng(self.seed)
        return {
            "request_id": [f"req-{i:06d}" for i in range(self.n)],
            "arrival_offset_ns": (np.cumsum(rng.exponential(self.interval_ms, self.n)) * 1e6).astype(
                np.int64
            ),
            "prompt_tokens": np.clip(
                rng.lognormal(np.log(self.prompt_median_tokens), 1.2, self.n), 8, self.max_prompt_tokens
            ).astype(np.int64),
            "completion_tokens": np.clip(rng.lognormal(3.0, 0.6, self.n), 2, 60).astype(np.int64),
            "stream": rng.random(self.n) < 0.8,
            "tools_count": np.where(rng.random(self.n) < 0.25, 2, 0),
            "model": np.where(rng.random(self.n) < 0.5, "model-a", "model-b"),
        }


def latencies_ns(shape: Shape, seed: int, ttft_ms: float = 80.0, tpot_ms: float = 10.0, sigma: float = 0.5):
    """TTFT and TPOT per request, lognormal with the given medians."""
    rng = np.random.default_rng(seed)
    ttft = rng.lognormal(np.log(ttft_ms * 1e6), sigma, shape.n)
    tpot = rng.lognormal(np.log(tpot_ms * 1e6), sigma / 2, shape.n)
    return ttft.astype(np.int64), tpot.astype(np.int64)


def _timing_columns(shape_arrays: dict, ttft_ns: np.ndarray, tpot_ns: np.ndarray) -> dict:
    tokens = shape_arrays["completion_tokens"]
    e2e = ttft_ns + tpot_ns * (tokens - 1)
    chunks = [
        [int(t + k * p) for k in range(int(n))] if stream else None
        for t, p, n, stream in zip(ttft_ns, tpot_ns, tokens, shape_arrays["stream"], strict=True)
    ]
    return {"ttft_ns": ttft_ns, "e2e_ns": e2e, "chunk_offsets_ns": chunks}


def write_run(
    run_dir: Path,
    shape: Shape,
    ttft_ns: np.ndarray,
    tpot_ns: np.ndarray,
    speed: float = 1.0,
    errors: dict[int, str] | None = None,
    lag_ns: int = 200_000,
    config: dict | None = None,
    error_details: dict[int, str] | None = None,
    stop_reason: str = "completed",
    not_sent: int = 0,
) -> Path:
    """A run directory as `llmreplay replay` writes it (results.parquet with RESULT_SCHEMA, run.json).

    `errors`: row -> error kind (shed_by_client rows are not sent); `error_details`: row -> what the
    failure said; `not_sent`: planned requests without a row (an interrupted run's, with `stop_reason`)."""
    a = shape.arrays()
    n = shape.n
    timing = _timing_columns(a, ttft_ns, tpot_ns)
    errors = errors or {}
    error_kind = [errors.get(i) for i in range(n)]
    failed = np.array([kind is not None for kind in error_kind])
    shed = np.array([kind == "shed_by_client" for kind in error_kind])
    scheduled = (a["arrival_offset_ns"] / speed).astype(np.int64)
    details = error_details or {}
    columns = {
        "request_id": a["request_id"],
        "session_id": [None] * n,
        "turn_index": [0] * n,
        "parent_request_id": [None] * n,
        "arrival_time": [_ts(EPOCH_US + int(o // 1000)) for o in a["arrival_offset_ns"]],
        "endpoint": ["chat_completions"] * n,
        "model": a["model"].tolist(),
        "stream": a["stream"].tolist(),
        "tools_count": a["tools_count"].tolist(),
        "tool_choice": [None] * n,
        "structured_output": ["none"] * n,
        "max_tokens": a["completion_tokens"].tolist(),
        "http_status": [STATUS_OF_KIND.get(kind, 200) for kind in error_kind],
        "error_kind": error_kind,
        "retry_after_ms": [None] * n,
        "prompt_tokens": a["prompt_tokens"].tolist(),
        "completion_tokens": [
            None if f else int(c) for f, c in zip(failed, a["completion_tokens"], strict=True)
        ],
        "cached_tokens": [0] * n,
        "token_source": ["server_usage"] * n,
        "tool_calls_count": [0] * n,
        "ttfb_ns": [None if f else int(t) for f, t in zip(failed, timing["ttft_ns"], strict=True)],
        "ttft_ns": [None if f else int(t) for f, t in zip(failed, timing["ttft_ns"], strict=True)],
        "e2e_ns": [None if f else int(t) for f, t in zip(failed, timing["e2e_ns"], strict=True)],
        "chunk_offsets_ns": [
            None if f else c for f, c in zip(failed, timing["chunk_offsets_ns"], strict=True)
        ],
        "finish_reason": [None if f else "length" for f in failed],
        "ttfo_ns": [None if f else int(t) for f, t in zip(failed, timing["ttft_ns"], strict=True)],
        "reasoning_tokens": [None if f else 0 for f in failed],  # no reasoning: TTFO is TTFT
        "reasoning_ns": [None if f else 0 for f in failed],
        "source_request_id": a["request_id"],
        "copy_index": [0] * n,
        "worker": [0] * n,
        "scheduled_offset_ns": scheduled.tolist(),
        "sent_offset_ns": [None if x else int(s + lag_ns) for x, s in zip(shed, scheduled, strict=True)],
        "dispatch_lag_ns": [None if x else lag_ns for x in shed],
        "session_wait_ns": [0] * n,
        "sent_time": [
            None if x else _ts(EPOCH_US + int((s + lag_ns) // 1000))
            for x, s in zip(shed, scheduled, strict=True)
        ],
        "recorded_prompt_tokens": a["prompt_tokens"].tolist(),
        "recorded_completion_tokens": a["completion_tokens"].tolist(),
        "requested_completion_tokens": a["completion_tokens"].tolist(),
        "error_detail": [details.get(i) if f else None for i, f in enumerate(failed)],
        "recorded_model": a["model"].tolist(),
        "warmup": [False] * n,
        "loop": [0] * n,
        "host": [None] * n,
        "shard": [None] * n,
        "cache_write_tokens": [None] * n,
    }
    table = pa.table(columns, schema=RESULT_SCHEMA)
    run_dir.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, run_dir / RESULTS_FILE)
    counts = {"planned": n + not_sent, "sent": int((~shed).sum()), "not_sent": not_sent}
    run_json = run_document(speed, stop_reason, counts, config or {})
    (run_dir / RUN_FILE).write_text(json.dumps(run_json))
    return run_dir


def run_document(speed: float = 1.0, stop_reason: str = "completed", counts: dict | None = None,
                 overrides: dict | None = None) -> dict:
    """A whole run.json, as the replay writes every key, for a synthetic run; `overrides` merged in
    (a nested record's keys one by one)."""
    counts = {"planned": 0, "sent": 0, "not_sent": 0, **(counts or {})}
    document = {
        "run_format_version": RUN_FORMAT_VERSION,
        "config": {"schedule": {"speed": speed}},  # where a replay states it (llmreplay.run_format)
        "target": {"base_url": "http://127.0.0.1:1/synthetic", "engine": "synthetic", "engine_from": "flag",
                   "models": []},
        "trace": {"path": "", "files": [], "meta": {}},
        "tokenizer": "synthetic", "versions": {},
        "machine": {"hostname": "synthetic", "cpus": 2, "platform": "synthetic"},
        "started_unix_ns": EPOCH_US * 1000, "ended_unix_ns": EPOCH_US * 1000,
        "start_unix_ns": None, "start_mono_ns": None, "stop_reason": stop_reason, "build_s": 0.0,
        "workers": [], "coordinator_max_rss_mb": 0.0, "builder": {},
        "counts": {"trace_rows": counts["planned"], "window_rows": counts["planned"], "unsupported_endpoint": 0,
                   "to_send": counts["planned"], **counts},
        "idle_removed_s": 0.0, "schedule_span_s": 0.0, "server_metrics": None, "summary": {},
    }  # fmt: skip
    for key, value in (overrides or {}).items():
        nested = isinstance(value, dict) and isinstance(document.get(key), dict)
        document[key] = {**document[key], **value} if nested else value
    return document


def copy_run_with(run: Path, copy: Path, name: str, values) -> Path:
    """A copy of the run directory `run` at `copy` whose results column `name` is `values(table)`."""
    shutil.copytree(run, copy)
    table = pq.read_table(copy / RESULTS_FILE)
    index = table.schema.get_field_index(name)
    field = table.schema.field(index)
    pq.write_table(table.set_column(index, field, pc.cast(values(table), field.type)), copy / RESULTS_FILE)
    return copy


def write_trace_file(path: Path, shape: Shape, ttft_ns: np.ndarray, tpot_ns: np.ndarray) -> Path:
    """A recorded (shape) trace of the same requests, timed at the gateway."""
    a = shape.arrays()
    timing = _timing_columns(a, ttft_ns, tpot_ns)
    n = shape.n
    rows = {
        "request_id": a["request_id"],
        "session_id": [None] * n,
        "turn_index": [0] * n,
        "parent_request_id": [None] * n,
        "think_time_ns": [None] * n,
        "arrival_time": [_ts(EPOCH_US + int(o // 1000)) for o in a["arrival_offset_ns"]],
        "endpoint": ["chat_completions"] * n,
        "model": a["model"].tolist(),
        "stream": a["stream"].tolist(),
        "user_id": [None] * n,
        "api_key_hash": [None] * n,
        "http_status": [200] * n,
        "error_kind": [None] * n,
        "retry_after_ms": [None] * n,
        "prompt_tokens": a["prompt_tokens"].tolist(),
        "completion_tokens": a["completion_tokens"].tolist(),
        "cached_tokens": [0] * n,
        "token_source": ["server_usage"] * n,
        "max_tokens": [None] * n,
        "temperature": [None] * n,
        "top_p": [None] * n,
        "n": [None] * n,
        "stop_present": [False] * n,
        "seed": [None] * n,
        "tools_count": a["tools_count"].tolist(),
        "tool_definition_tokens": [0] * n,
        "tool_choice": [None] * n,
        "tool_calls_count": [0] * n,
        "structured_output": ["none"] * n,
        "schema_tokens": [0] * n,
        "messages": [[{"role": "user", "tokens": int(p)}] for p in a["prompt_tokens"]],
        "prefix_block_hashes": [[]] * n,
        "ttfb_ns": timing["ttft_ns"].tolist(),
        "ttft_ns": timing["ttft_ns"].tolist(),
        "e2e_ns": timing["e2e_ns"].tolist(),
        "chunk_offsets_ns": timing["chunk_offsets_ns"],
        "finish_reason": ["length"] * n,
        "invalid_fields": [None] * n,
        "ttfo_ns": timing["ttft_ns"].tolist(),  # no reasoning: TTFO is TTFT
        "reasoning_tokens": [0] * n,
        "reasoning_ns": [0] * n,
        "cache_write_tokens": [None] * n,
        "server_state": [None] * n,
        "counted_prompt_tokens": a["prompt_tokens"].tolist(),
    }
    from llmreplay.trace_arrow import trace_schema

    table = pa.table(rows, schema=trace_schema(False))
    return write_trace(path, table, TraceMeta(source="synthetic test trace", clock_domain="gateway"))


def _ts(us: int) -> datetime.datetime:
    return datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC) + datetime.timedelta(microseconds=us)
