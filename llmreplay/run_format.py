"""The replay run format: `results.parquet` (one row per request) next to `run.json`.

Columns shared with the trace keep the trace's names and meaning, so a run joins a trace on
`request_id` and the same metric functions (llmreplay.metrics) apply to both. Replay timings are
relative to the actual send time (client clock domain); trace timings to the gateway arrival.
"""

from __future__ import annotations

import pyarrow as pa

from llmreplay.trace_format import SHAPE_COLUMNS, TIMESTAMP_TYPE

RUN_FORMAT_VERSION = "1.0"
RESULTS_FILE = "results.parquet"
RUN_FILE = "run.json"
SERVER_METRICS_FILE = "server_metrics.parquet"

# Trace columns carried into results unchanged (the request as the trace describes it) ...
_FROM_TRACE = (
    "request_id",
    "session_id",
    "turn_index",
    "parent_request_id",
    "arrival_time",
    "endpoint",
    "model",
    "stream",
    "tools_count",
    "tool_choice",
    "structured_output",
    "max_tokens",
)
# ... and trace columns that the replay measures anew, with the same meaning.
_MEASURED = (
    "http_status",
    "error_kind",
    "retry_after_ms",
    "prompt_tokens",
    "completion_tokens",
    "cached_tokens",
    "token_source",
    "tool_calls_count",
    "ttfb_ns",
    "ttft_ns",
    "e2e_ns",
    "chunk_offsets_ns",
    "finish_reason",
)

_TRACE_TYPES = {name: (dtype, nullable) for name, dtype, nullable in SHAPE_COLUMNS}

REPLAY_COLUMNS: tuple[tuple[str, pa.DataType, bool], ...] = (
    ("source_request_id", pa.string(), False),  # the trace row this request replays (copies share it)
    ("copy_index", pa.int16(), False),  # 0 for the original, k for the k-th --scale copy
    ("worker", pa.int16(), False),
    ("scheduled_offset_ns", pa.int64(), False),  # due time, from the run's start (monotonic clock)
    ("sent_offset_ns", pa.int64(), True),  # actual send time, from the run's start; null when not sent
    ("dispatch_lag_ns", pa.int64(), True),  # sent - scheduled, excluding session_wait_ns
    ("session_wait_ns", pa.int64(), False),  # how much later than scheduled the previous turn made it
    ("sent_time", TIMESTAMP_TYPE, True),  # wall-clock anchor of the send, for aligning with other systems
    ("recorded_prompt_tokens", pa.int32(), True),
    ("recorded_completion_tokens", pa.int32(), True),
    ("requested_completion_tokens", pa.int32(), True),  # max_tokens actually sent
)

RESULT_COLUMNS: tuple[tuple[str, pa.DataType, bool], ...] = (
    tuple((name, *_TRACE_TYPES[name]) for name in _FROM_TRACE)
    + tuple((name, _TRACE_TYPES[name][0], True) for name in _MEASURED)
    + REPLAY_COLUMNS
)

RESULT_SCHEMA = pa.schema([pa.field(n, t, nullable=nl) for n, t, nl in RESULT_COLUMNS])
