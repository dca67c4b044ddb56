"""The run format: results.parquet (a ResultRow per request, its fields the columns) and run.json (a RunInfo).

Both carry RUN_FORMAT_VERSION; readers take every minor of a major they know (columns a later minor added
read as nulls) and refuse another major. A column named like a trace column has its type and meaning.
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import socket
from collections.abc import Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from llmreplay.errors import BadInput, first_line
from llmreplay.output_paths import write_atomic
from llmreplay.trace_arrow import arrow_type
from llmreplay.trace_format import BOOL, INT16, INT32, INT64, STRING, TIMESTAMP, version_tuple
from llmreplay.trace_format import COLUMNS as TRACE_COLUMNS

# Version rule: MAJOR.MINOR. A minor only adds columns (`since` on the column; older runs read null or the
# default) and run.json keys.
RUN_FORMAT_VERSION = "1.4"
READABLE_MAJOR_VERSIONS = (1,)
OLDEST_VERSION = "1.0"  # what a run that states no version is (written before the version was)
METADATA_KEY = b"llmreplay.run"  # results.parquet's footer: JSON {"run_format_version": ...}
RESULTS_FILE = "results.parquet"
RUN_FILE = "run.json"
SERVER_METRICS_FILE = "server_metrics.parquet"

# Who fills a column in: the merge copies TRACE and OUTCOME columns by name, and computes MERGE ones.
TRACE = "trace"  # the request as the trace describes it: the trace row's value, unchanged
OUTCOME = "outcome"  # measured by the client: the attribute of the same name of its Outcome (null if shed)
MERGE = "merge"  # computed by the merge from the plan, the request as sent and the outcome

_REQUIRED = dataclasses.MISSING


def column(type_: str | None = None, default: Any = _REQUIRED, *, made_by: str = MERGE, since: str = "1.0"):
    """A ResultRow field that is a column, nullable exactly when its default is None; no `type_`: the
    trace's column of the same name (same type, same meaning)."""
    spec = {"type": type_, "made_by": made_by, "since": since}
    return field(default=default, metadata={"column": spec})


@dataclass(slots=True, kw_only=True)
class ResultRow:
    """One replayed request; its fields are results.parquet's columns, in file order."""

    request_id: str = column()  # the trace's, with a copy suffix for a --scale copy
    session_id: str | None = column(None, None)  # likewise
    turn_index: int = column(made_by=TRACE)
    parent_request_id: str | None = column(None, None, made_by=TRACE)
    arrival_time: int = column(made_by=TRACE)  # the trace's arrival, microseconds since the Unix epoch
    endpoint: str = column(made_by=TRACE)
    model: str | None = column(None, None)  # as sent: --model, --model-map, or the trace's
    stream: bool = column(made_by=TRACE)
    tools_count: int = column(made_by=TRACE)
    tool_choice: str | None = column(None, None, made_by=TRACE)
    structured_output: str = column(made_by=TRACE)
    max_tokens: int | None = column(None, None, made_by=TRACE)
    # Measured anew by the replay, with the trace's meaning; offsets from the actual send time.
    http_status: int | None = column(None, None, made_by=OUTCOME)
    error_kind: str | None = column(None, None, made_by=OUTCOME)  # or shed_by_client: never sent
    retry_after_ms: int | None = column(None, None, made_by=OUTCOME)
    prompt_tokens: int | None = column(None, None)  # the server's usage, else counted (token_source)
    completion_tokens: int | None = column(None, None)
    cached_tokens: int | None = column(None, None)
    token_source: str | None = column(None, None)
    tool_calls_count: int | None = column(None, None, made_by=OUTCOME)
    ttfb_ns: int | None = column(None, None, made_by=OUTCOME)
    ttft_ns: int | None = column(None, None, made_by=OUTCOME)
    e2e_ns: int | None = column(None, None, made_by=OUTCOME)
    chunk_offsets_ns: Sequence[int] | None = column(None, None, made_by=OUTCOME)
    finish_reason: str | None = column(None, None, made_by=OUTCOME)
    ttfo_ns: int | None = column(None, None, made_by=OUTCOME, since="1.2")
    reasoning_tokens: int | None = column(None, None, made_by=OUTCOME, since="1.2")
    reasoning_ns: int | None = column(None, None, made_by=OUTCOME, since="1.2")
    # The replay's own.
    source_request_id: str = column(STRING)  # the trace row this request replays (copies share it)
    copy_index: int = column(INT16)  # 0 for the original, k for the k-th --scale copy
    worker: int = column(INT16)
    scheduled_offset_ns: int = column(INT64)  # due time, from the run's start (monotonic clock)
    sent_offset_ns: int | None = column(INT64, None)  # actual send time, from the run's start; null: not sent
    dispatch_lag_ns: int | None = column(INT64, None)  # sent - scheduled, excluding session_wait_ns
    session_wait_ns: int = column(INT64)  # how much later than scheduled the previous turn made it
    sent_time: int | None = column(TIMESTAMP, None)  # wall-clock anchor of the send (us), to align systems
    recorded_prompt_tokens: int | None = column(INT32, None)
    recorded_completion_tokens: int | None = column(INT32, None)
    requested_completion_tokens: int | None = column(INT32, None)  # max_tokens actually sent
    # What a failed request said: the first 2 KB of an error response's body, or the client's own
    # description (stream cut, bad JSON, ...); secrets scrubbed (llmreplay.redaction). Null on success.
    error_detail: str | None = column(STRING, None, since="1.1")
    recorded_model: str | None = column(STRING, None, since="1.3")  # the trace's; `model`: as sent
    # The run's phases (replayer.plan.phases); an older run reads warmup False and loop 0.
    warmup: bool = column(BOOL, False, since="1.4")  # replayed before the measured window: in no verdict
    loop: int = column(INT32, 0, since="1.4")  # the --soak loop (0 without --soak)
    # A merged multi-host run's (llmreplay merge): the host and shard that sent the row; null otherwise.
    host: str | None = column(STRING, None, since="1.4")
    shard: int | None = column(INT16, None, since="1.4")
    # Prompt tokens written to the prefix cache (Anthropic's cache_creation_input_tokens), the trace's meaning.
    cache_write_tokens: int | None = column(None, None, since="1.4")


@dataclass(frozen=True, slots=True)
class ResultColumn:
    """One results column as the format describes it (built from a ResultRow field)."""

    name: str
    type: str  # a llmreplay.trace_format type descriptor
    nullable: bool
    made_by: str  # TRACE, OUTCOME or MERGE
    since: str  # the run format version that added it
    fill: Any = None  # what a run older than `since` reads (a column that is never null: its default)


def _columns() -> tuple[ResultColumn, ...]:
    trace_types = {c.name: c.type for c in TRACE_COLUMNS}
    found = []
    for f in dataclasses.fields(ResultRow):
        spec = dict(f.metadata["column"])
        spec["type"] = spec["type"] or trace_types[f.name]
        fill = None if f.default is _REQUIRED else f.default
        found.append(ResultColumn(name=f.name, nullable=f.default is None, fill=fill, **spec))
    return tuple(found)


RESULT_COLUMNS = _columns()
TRACE_COPIED = tuple(c.name for c in RESULT_COLUMNS if c.made_by == TRACE)
OUTCOME_COPIED = tuple(c.name for c in RESULT_COLUMNS if c.made_by == OUTCOME)
ADDED_COLUMNS = {c.name: c.since for c in RESULT_COLUMNS if c.since != "1.0"}
RESULT_SCHEMA = pa.schema(
    [pa.field(c.name, arrow_type(c.type), nullable=c.nullable) for c in RESULT_COLUMNS],
    metadata={METADATA_KEY: json.dumps({"run_format_version": RUN_FORMAT_VERSION})},
)
_GETTERS = tuple(attrgetter(c.name) for c in RESULT_COLUMNS)


def result_table(rows: Sequence[ResultRow]) -> pa.Table:
    """Rows as a table in RESULT_SCHEMA (its version key included)."""
    arrays = [
        pa.array([get(row) for row in rows], f.type) for get, f in zip(_GETTERS, RESULT_SCHEMA, strict=True)
    ]
    return pa.Table.from_arrays(arrays, schema=RESULT_SCHEMA)


@dataclass(frozen=True, slots=True)
class RunTarget:
    base_url: str
    engine: str
    engine_from: str  # how the engine was known: the flag, or what the target answered
    models: list[str]


@dataclass(frozen=True, slots=True)
class RunTrace:
    path: str
    files: list[str]
    meta: dict[str, Any]  # the trace's TraceMeta


@dataclass(frozen=True, slots=True)
class RunMachine:
    hostname: str
    cpus: int | None
    platform: str

    @classmethod
    def this_one(cls) -> RunMachine:
        return cls(socket.gethostname(), os.cpu_count(), platform.platform())


@dataclass(frozen=True, slots=True)
class RunCounts:
    trace_rows: int
    window_rows: int
    planned: int
    unsupported_endpoint: int
    to_send: int  # planned, supported and within --duration
    sent: int
    not_sent: int  # never attempted: the run stopped before their time


@dataclass(frozen=True, slots=True, kw_only=True)
class RunInfo:
    """run.json: what was replayed against what, on which machine, how it went; its fields are the keys."""

    config: dict[str, Any]  # the replay's configuration, without secrets
    target: RunTarget
    trace: RunTrace
    tokenizer: str
    versions: dict[str, str]
    machine: RunMachine
    started_unix_ns: int
    ended_unix_ns: int
    start_unix_ns: int | None  # wall clock of the schedule's offset 0; null when never started
    start_mono_ns: int | None  # time.perf_counter_ns() of offset 0 (this machine)
    stop_reason: str  # completed, duration or interrupted
    build_s: float
    workers: list[dict[str, Any]]  # per worker: event-loop CPU seconds, peak RSS, ...
    coordinator_max_rss_mb: float
    builder: dict[str, Any]  # bodies: peak RSS, in the coordinator or its own process
    counts: RunCounts
    idle_removed_s: float
    schedule_span_s: float
    server_metrics: dict[str, Any] | None
    summary: dict[str, Any]  # the run's verdict (replayer.results.summary)
    preflight: dict[str, Any] | None = None  # since 1.3: the target checked before the clock; null: skipped
    # since 1.4: warm-up, measured window and soak loops (planned, completed); replayer.plan.phases
    phases: dict[str, Any] | None = None
    # since 1.4, multi-host replays (replayer.plan.host_shards, replayer.launch.host_clock): what identifies the
    # trace's rows, this shard's plan, the host clock at arm and end; a merged run's hosts
    trace_fingerprint: str | None = None
    shard_plan: dict[str, Any] | None = None
    clock: dict[str, Any] | None = None
    hosts: list[dict[str, Any]] | None = None
    run_format_version: str = RUN_FORMAT_VERSION


def run_info_from_json(document: dict[str, Any], where: str) -> RunInfo:
    """run.json of any readable 1.x as a RunInfo, built here only: keys a later minor added are left out,
    fields an earlier one lacked take their defaults (`to_send` before 1.1: planned less unsupported);
    BadInput in one line when a field is missing or not of its type."""
    try:
        counts = dict(document["counts"])
        counts.setdefault("to_send", counts["planned"] - counts["unsupported_endpoint"])
        known = {f.name for f in dataclasses.fields(RunInfo)}
        values = {key: value for key, value in document.items() if key in known}
        values |= {
            "target": _record(RunTarget, document["target"]),
            "trace": _record(RunTrace, document["trace"]),
            "machine": _record(RunMachine, document["machine"]),
            "counts": _record(RunCounts, counts),
        }
        info = RunInfo(**values)
    except (KeyError, TypeError) as exc:
        raise BadInput(f"{where}: run.json lacks or misspells {_first_arg(exc)}") from None
    numbers = [*dataclasses.astuple(info.counts), info.started_unix_ns, info.ended_unix_ns]
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in numbers):
        raise BadInput(f"{where}: run.json counts and times must be integers")
    return info


def _record(cls, document: Any):
    """One of run.json's nested records, its known fields only (a later minor may add others)."""
    if not isinstance(document, dict):
        raise TypeError(cls.__name__)
    return cls(**{f.name: document[f.name] for f in dataclasses.fields(cls)})


def _first_arg(exc: Exception) -> str:
    return str(exc.args[0]) if exc.args else type(exc).__name__


def write_run_info(run_dir: Path, info: RunInfo) -> None:
    """run.json, written atomically (sorted keys, indented)."""
    options = orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS | orjson.OPT_SERIALIZE_NUMPY
    write_atomic(run_dir / RUN_FILE, orjson.dumps(dataclasses.asdict(info), option=options))


@dataclass(frozen=True, slots=True)
class ReadRun:
    """A run read at its version edge: its rows, run.json as written (shown, never probed) and as the
    typed record every decision reads (None: no run.json beside the results)."""

    table: pa.Table
    document: dict[str, Any]
    info: RunInfo | None


def read_run(results: Path, where: str) -> ReadRun:
    """results.parquet in RESULT_SCHEMA and the run.json beside it, versions checked; a run.json that is
    not a run's is one BadInput line."""
    try:
        table = pq.read_table(results)
    except (pa.ArrowInvalid, OSError) as exc:
        raise BadInput(f"{where} {results}: not a readable Parquet file ({first_line(exc)})") from None
    run_json = _read_run_json(results.parent / RUN_FILE, where)
    stated = _results_version(table.schema.metadata, f"{where} {results}")
    version = stated or run_json.get("run_format_version") or OLDEST_VERSION
    table = conform_results(table, version, f"{where} {results}")
    _check_unique_requests(table, f"{where} {results}")
    info = run_info_from_json(run_json, f"{where} {results.parent}") if run_json else None
    return ReadRun(table, run_json, info)


def read_run_info(run_dir: Path, where: str) -> RunInfo:
    """The run.json of a finished run, typed; BadInput naming what is missing or not a run's."""
    path = Path(run_dir) / RUN_FILE
    if not path.is_file():
        raise BadInput(f"{where} {run_dir}: no {RUN_FILE} (not a finished run)")
    return run_info_from_json(_read_run_json(path, where), f"{where} {run_dir}")


def find_results(root: Path) -> Path | None:
    """results.parquet of the run directory `root` (or `root` itself, that file); None when `root` is not
    a run; BadInput for a run directory without it (a replay that did not finish)."""
    if root.is_dir() and (root / RESULTS_FILE).is_file():
        return root / RESULTS_FILE
    if root.is_file() and root.name == RESULTS_FILE:
        return root
    if root.is_dir() and (root / RUN_FILE).is_file():
        raise BadInput(f"{root}: run directory without {RESULTS_FILE} (did the replay finish?)")
    return None


def stated_load(info: RunInfo | None) -> dict[str, float]:
    """The replay's --speed and --scale as run.json states them (positive numbers only; missing otherwise)."""
    schedule = info.config.get("schedule") if info is not None and isinstance(info.config, dict) else None
    if not isinstance(schedule, dict):
        return {}
    return {
        name: float(value)
        for name in ("speed", "scale")
        if isinstance(value := schedule.get(name), int | float) and not isinstance(value, bool) and value > 0
    }


def check_run_format_version(version: object, where: str) -> None:
    """BadInput unless this llmreplay reads runs of `version` (one line naming `where`)."""
    try:
        major, _ = version_tuple(str(version))
    except ValueError:
        raise BadInput(f"{where}: run_format_version {version!r} is not a version") from None
    if major not in READABLE_MAJOR_VERSIONS:
        readable = ", ".join(f"{v}.x" for v in READABLE_MAJOR_VERSIONS)
        raise BadInput(
            f"{where}: run format version {version} is not supported (this llmreplay reads {readable}); "
            "upgrade llmreplay"
        )


def conform_results(table: pa.Table, version: str, where: str) -> pa.Table:
    """A results table of run format `version` in RESULT_SCHEMA: columns a later minor added read as
    nulls (or their default, for one that is never null); any other missing column, or values that do not fit, are bad input."""
    for c, f in zip(RESULT_COLUMNS, RESULT_SCHEMA, strict=True):
        if c.name in table.column_names:
            continue
        if version_tuple(c.since) <= version_tuple(version):
            raise BadInput(f"{where}: column '{c.name}' is missing (not a llmreplay results file?)")
        filled = pa.nulls(table.num_rows, f.type)
        if c.fill is not None:
            filled = pc.fill_null(filled, pa.scalar(c.fill, f.type))
        table = table.append_column(pa.field(c.name, f.type), filled)
    try:
        return table.select(RESULT_SCHEMA.names).cast(RESULT_SCHEMA)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise BadInput(f"{where}: values do not fit the results schema ({first_line(exc)})") from None


def _check_unique_requests(table: pa.Table, where: str) -> None:
    """Every row names the trace request it replays, and each (request, copy, loop) is there once."""
    if table.column("source_request_id").null_count:
        raise BadInput(f"{where}: column 'source_request_id' has missing values")
    keys = pc.binary_join_element_wise(
        table.column("source_request_id"),
        pc.cast(table.column("copy_index"), pa.string()),
        pc.cast(table.column("loop"), pa.string()),
        "#",
    )
    if pc.count_distinct(keys).as_py() != table.num_rows:
        raise BadInput(f"{where}: duplicate (source_request_id, copy_index, loop) rows")


def _results_version(metadata: dict[bytes, bytes] | None, where: str) -> str | None:
    """The version in results.parquet's footer, checked; None for a file written before the key."""
    raw = (metadata or {}).get(METADATA_KEY)
    if raw is None:
        return None
    try:
        version = json.loads(raw)["run_format_version"]
    except (ValueError, TypeError, KeyError):
        raise BadInput(f"{where}: '{METADATA_KEY.decode()}' metadata is not run format JSON") from None
    check_run_format_version(version, where)
    return version


def _read_run_json(path: Path, where: str) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text())
    except (ValueError, OSError) as exc:
        raise BadInput(f"{where} {path}: not valid JSON ({first_line(exc)})") from None
    if not isinstance(data, dict):
        raise BadInput(f"{where} {path}: expected a JSON object")
    if data.get("run_format_version") is not None:
        check_run_format_version(data["run_format_version"], f"{where} {path}")
    return data


