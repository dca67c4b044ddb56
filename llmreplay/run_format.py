"""The replay run format: `results.parquet` (one row per request) next to `run.json`.

Columns shared with the trace keep the trace's names and meaning, so a run joins a trace on
`request_id` and the same metric functions (llmreplay.metrics) apply to both. Replay timings are
relative to the actual send time (client clock domain); trace timings to the gateway arrival.

Versions: run.json's `run_format_version`. A minor version only adds nullable columns
(ADDED_COLUMNS); readers fill them with nulls for older runs and refuse an unknown major version.
"""

from __future__ import annotations

import pyarrow as pa

from llmreplay.errors import BadInput
from llmreplay.trace_arrow import TIMESTAMP_TYPE, trace_schema
from llmreplay.trace_format import MEASURED_COLUMNS, RUN_COPIED_COLUMNS

RUN_FORMAT_VERSION = "1.1"  # 1.1 added error_detail
READABLE_MAJOR_VERSIONS = (1,)
RESULTS_FILE = "results.parquet"
RUN_FILE = "run.json"
SERVER_METRICS_FILE = "server_metrics.parquet"

_FROM_TRACE = RUN_COPIED_COLUMNS  # the request as the trace describes it ...
_MEASURED = MEASURED_COLUMNS  # ... and what the replay measures anew, with the same meaning

_TRACE_TYPES = {f.name: (f.type, f.nullable) for f in trace_schema(False)}

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
    # What a failed request said: the first 2 KB of an error response's body, or the client's own
    # description (stream cut, bad JSON, ...); secrets scrubbed (llmreplay.redaction). Null on success.
    ("error_detail", pa.string(), True),
)
# Columns added by a minor version: runs written before it lack them, and readers fill them with nulls.
ADDED_COLUMNS = {"error_detail": "1.1"}

RESULT_COLUMNS: tuple[tuple[str, pa.DataType, bool], ...] = (
    tuple((name, *_TRACE_TYPES[name]) for name in _FROM_TRACE)
    + tuple((name, _TRACE_TYPES[name][0], True) for name in _MEASURED)
    + REPLAY_COLUMNS
)

RESULT_SCHEMA = pa.schema([pa.field(n, t, nullable=nl) for n, t, nl in RESULT_COLUMNS])


def check_run_format_version(version: object, where: str) -> None:
    """Refuse a run.json whose major version this llmreplay cannot read (a missing version is 1.0)."""
    if version is None:
        return
    try:
        major = int(str(version).split(".", 1)[0])
    except ValueError:
        raise BadInput(f"{where}: run_format_version {version!r} is not a version") from None
    if major not in READABLE_MAJOR_VERSIONS:
        readable = ", ".join(f"{v}.x" for v in READABLE_MAJOR_VERSIONS)
        raise BadInput(
            f"{where}: run format version {version} is not supported (this llmreplay reads {readable}); "
            "upgrade llmreplay"
        )


def conform_results(table: pa.Table, where: str) -> pa.Table:
    """A results table in RESULT_SCHEMA: columns a later minor version added read as nulls; a column
    missing otherwise, or values that do not fit, are bad input."""
    for name, dtype, _ in RESULT_COLUMNS:
        if name in table.column_names:
            continue
        if name not in ADDED_COLUMNS:
            raise BadInput(f"{where}: column '{name}' is missing (not a llmreplay results file?)")
        table = table.append_column(pa.field(name, dtype), pa.nulls(table.num_rows, dtype))
    try:
        return table.select(RESULT_SCHEMA.names).cast(RESULT_SCHEMA)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise BadInput(f"{where}: values do not fit the results schema ({first})") from None
