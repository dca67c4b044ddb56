"""Trace format: the columns (the fields of TraceRecord), their types, vocabularies and bounds, the version rule.

Plain Python: no pyarrow, numpy or stage imports, so the recorder's proxy may load it. The Arrow
schema is built from these descriptors in llmreplay.trace_arrow.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
from dataclasses import dataclass, field
from typing import Any

from llmreplay.error_kinds import ERROR_KINDS

# Version rule: MAJOR.MINOR. A minor version only adds nullable columns (`since` on the column) and
# vocabulary values. A reader reads every file of a major it knows: a column the file lacks that a
# minor version added reads as nulls, a column the reader does not know is ignored, and a vocabulary
# value it does not know is kept as it is when the file's minor is newer than the reader's (in a file
# of the reader's own or an older minor, the writer was wrong: refused). Another major: refused.
FORMAT_VERSION = "1.4"
READABLE_MAJOR_VERSIONS = (1,)
METADATA_KEY = b"llmreplay"
MOONCAKE_BLOCK_SIZE = 512  # Mooncake's hash_ids, what SGLang and AIPerf assume unless told
DEFAULT_BLOCK_SIZE = MOONCAKE_BLOCK_SIZE  # a file that names no block size; public-trace imports
# What the recorder hashes by: vLLM's cache block, so a replay shares every prefix production shared
# to within one engine block (a multiple of it still exports as Mooncake's 512).
RECORDED_BLOCK_SIZE = 16

# The APIs a row may come from (llmreplay.wire.endpoints.ENDPOINTS has a row for each): a new API adds its
# value here, in VALUES_SINCE, and a minor version (docs/extending.md, "An API")
ENDPOINTS = ("chat_completions", "completions", "embeddings", "responses", "messages")
TOKEN_SOURCES = ("server_usage", "tokenizer", "imported")
STRUCTURED_OUTPUT_KINDS = ("none", "json_object", "json_schema")
TOOL_CHOICES = ("auto", "none", "required", "function")  # "function": a named function was forced
SERVER_STATES = ("previous_response_id", "conversation")  # a Responses request continuing stored state
# Vocabulary values added by a minor version (absent: since 1.0). A file older than a value's version
# holding it was written wrong: refused, naming the version the value needs.
VALUES_SINCE = {"endpoint": {"messages": "1.3"}}

# Type descriptors: the Arrow type of each column, spelled as docs/trace-format.md spells it.
STRING, BOOL, INT16, INT32, INT64, FLOAT32 = "string", "bool", "int16", "int32", "int64", "float32"
TIMESTAMP = "timestamp[us, UTC]"
MESSAGE_SHAPE = "struct<role: string, tokens: int32>"
INTEGER_TYPES = (INT16, INT32, INT64)


def list_of(item: str) -> str:
    return f"list<{item}>"


def item_type(descriptor: str) -> str | None:
    """The item descriptor of a list descriptor; None for any other."""
    return descriptor[5:-1] if descriptor.startswith("list<") else None


# Largest duration a trace may hold: 2**53 ns (about 104 days), exact as a float64, so every stage
# may compute with it in floats. Arrivals are bounded the same way (2**53 us: the year 2255).
MAX_DURATION_NS = 1 << 53
MAX_ARRIVAL_US = 1 << 53
# Value ranges (inclusive; None: the type's limit). A list column's range holds for every item.
COUNT = (0, None)
DURATION_NS = (0, MAX_DURATION_NS)
DURATION_MS = (0, MAX_DURATION_NS // 1_000_000)
ARRIVAL_US = (0, MAX_ARRIVAL_US)

_REQUIRED = dataclasses.MISSING


def column(
    type_: str, default: Any = _REQUIRED, *, since="1.0", values=None, bounds=(None, None), content=False
):
    """A TraceRecord field that is a column; it is nullable exactly when its default is None."""
    spec = {"type": type_, "since": since, "values": values, "bounds": bounds, "content": content}
    return field(default=default, metadata={"column": spec})


@dataclass(frozen=True, slots=True)
class MessageShape:
    role: str
    tokens: int


@dataclass(frozen=True, slots=True, kw_only=True)
class TraceRecord:
    """One request; its fields are the trace's columns, in file order (content columns last)."""

    request_id: str = column(STRING)  # unique within the trace
    session_id: str | None = column(STRING, None)
    turn_index: int = column(INT32, 0, bounds=COUNT)
    parent_request_id: str | None = column(STRING, None)
    think_time_ns: int | None = column(INT64, None, bounds=DURATION_NS)
    arrival_time: int = column(TIMESTAMP, bounds=ARRIVAL_US)  # microseconds since the Unix epoch, UTC
    endpoint: str = column(STRING, values=ENDPOINTS)
    model: str | None = column(STRING, None)
    stream: bool = column(BOOL, False)
    user_id: str | None = column(STRING, None)
    api_key_hash: str | None = column(STRING, None)
    http_status: int | None = column(INT16, None)
    error_kind: str | None = column(STRING, None, values=ERROR_KINDS)
    retry_after_ms: int | None = column(INT64, None, bounds=DURATION_MS)
    prompt_tokens: int = column(INT32, bounds=COUNT)
    completion_tokens: int | None = column(INT32, None, bounds=COUNT)
    cached_tokens: int | None = column(INT32, None, bounds=COUNT)
    token_source: str = column(STRING, values=TOKEN_SOURCES)
    max_tokens: int | None = column(INT32, None, bounds=COUNT)
    temperature: float | None = column(FLOAT32, None)
    top_p: float | None = column(FLOAT32, None)
    n: int | None = column(INT16, None)
    stop_present: bool = column(BOOL, False)
    seed: int | None = column(INT64, None)
    tools_count: int = column(INT16, 0, bounds=COUNT)
    tool_definition_tokens: int = column(INT32, 0, bounds=COUNT)
    tool_choice: str | None = column(STRING, None, values=TOOL_CHOICES)
    tool_calls_count: int = column(INT16, 0, bounds=COUNT)
    structured_output: str = column(STRING, "none", values=STRUCTURED_OUTPUT_KINDS)
    schema_tokens: int = column(INT32, 0, bounds=COUNT)
    messages: tuple[MessageShape, ...] = column(list_of(MESSAGE_SHAPE), ())
    prefix_block_hashes: tuple[int, ...] = column(list_of(INT64), ())
    ttfb_ns: int | None = column(INT64, None, bounds=DURATION_NS)
    ttft_ns: int | None = column(INT64, None, bounds=DURATION_NS)
    e2e_ns: int | None = column(INT64, None, bounds=DURATION_NS)
    chunk_offsets_ns: tuple[int, ...] | None = column(list_of(INT64), None, bounds=DURATION_NS)
    finish_reason: str | None = column(STRING, None)
    # columns whose value was out of range as received: written as null and named here
    invalid_fields: tuple[str, ...] | None = column(list_of(STRING), None, since="1.1")
    # streamed answers (llmreplay.wire.stream_timing): the first answer token, and the reasoning before it
    ttfo_ns: int | None = column(INT64, None, since="1.2", bounds=DURATION_NS)
    reasoning_tokens: int | None = column(INT32, None, since="1.2", bounds=COUNT)
    reasoning_ns: int | None = column(INT64, None, since="1.2", bounds=DURATION_NS)
    # prompt tokens written to the engine's prompt cache (Anthropic cache_creation_input_tokens)
    cache_write_tokens: int | None = column(INT32, None, since="1.3", bounds=COUNT)
    # a Responses request continuing state the server stored: what it names (the ids are not kept)
    server_state: str | None = column(STRING, None, since="1.3", values=SERVER_STATES)
    # the prompt as the trace's tokenizer counts it (messages or prompt, and tools; no template): beside
    # prompt_tokens (production's count) it tells whether the hashes and message counts are in
    # production's own tokens (llmreplay.count_units)
    counted_prompt_tokens: int | None = column(INT32, None, since="1.4", bounds=COUNT)
    # content traces only: JSON text exactly as the client sent / the engine answered, in each API's own shape
    content_messages: str | None = column(STRING, None, content=True)  # messages array / Responses `input`
    content_prompt: str | None = column(STRING, None, content=True)  # completions `prompt` field
    content_tools: str | None = column(STRING, None, content=True)  # tool definitions array
    content_response_format: str | None = column(STRING, None, content=True)
    content_response: str | None = column(STRING, None, content=True)  # generated text of choice 0
    content_tool_calls: str | None = column(STRING, None, content=True)  # returned calls, chat-shaped
    # Responses `instructions` / Anthropic `system`
    content_system: str | None = column(STRING, None, since="1.3", content=True)

    def to_row(self) -> dict[str, Any]:
        """A dict keyed by column name (tuples as lists), ready for `pa.Table.from_pylist`."""
        row = {name: getattr(self, name) for name in COLUMN_NAMES}
        row["messages"] = [{"role": m.role, "tokens": m.tokens} for m in self.messages]
        for name in _LIST_COLUMNS:
            if row[name] is not None:
                row[name] = list(row[name])
        return row

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> TraceRecord:
        """Inverse of `to_row`; accepts rows read back from Parquet (`to_pylist`); unknown keys are ignored."""
        values = {name: row[name] for name in COLUMN_NAMES if name in row}
        arrival = values["arrival_time"]
        values["arrival_time"] = arrival if isinstance(arrival, int) else _datetime_to_us(arrival)
        values["messages"] = tuple(MessageShape(m["role"], m["tokens"]) for m in values.get("messages") or ())
        values["prefix_block_hashes"] = tuple(values.get("prefix_block_hashes") or ())
        for name in _LIST_COLUMNS:
            if values.get(name) is not None:
                values[name] = tuple(values[name])
        return cls(**values)


@dataclass(frozen=True, slots=True)
class Column:
    """One column as the format describes it (built from a TraceRecord field)."""

    name: str
    type: str  # a descriptor: STRING, INT32, list_of(INT64), ...
    nullable: bool
    since: str  # the format version that added it
    values: tuple[str, ...] | None  # the closed vocabulary, if any
    bounds: tuple[int | None, int | None]  # inclusive (low, high) for integers and times; None: the type's
    content: bool  # present in content traces only


def _columns() -> tuple[Column, ...]:
    found = []
    for f in dataclasses.fields(TraceRecord):
        found.append(Column(name=f.name, nullable=f.default is None, **f.metadata["column"]))
    return tuple(found)


COLUMNS = _columns()
COLUMN_NAMES = tuple(c.name for c in COLUMNS)
SHAPE_COLUMN_NAMES = tuple(c.name for c in COLUMNS if not c.content)
CONTENT_COLUMN_NAMES = tuple(c.name for c in COLUMNS if c.content)
# Derived views the readers and writers check with.
ENUM_COLUMNS = {c.name: c.values for c in COLUMNS if c.values}
NON_NEGATIVE_COLUMNS = tuple(c.name for c in COLUMNS if c.bounds[0] == 0 and c.type in INTEGER_TYPES)
UPPER_BOUNDS = {c.name: c.bounds[1] for c in COLUMNS if c.bounds[1] is not None}
ADDED_COLUMNS = {c.name: c.since for c in COLUMNS if c.since != "1.0"}
_LIST_COLUMNS = tuple(c.name for c in COLUMNS if item_type(c.type) and c.name != "messages")

# Column subsets the stages read, named here so every trace name has this one home.
SESSION_COLUMNS = ("session_id", "turn_index", "parent_request_id", "think_time_ns")
SAMPLING_COLUMNS = ("temperature", "top_p", "n", "seed")  # passed to the engine as recorded
LATENCY_COLUMNS = ("ttft_ns", "ttfo_ns", "ttfb_ns", "e2e_ns")  # single intervals from the request's start
# What a request body alone determines (the recorder's RequestShape), and the content it carries.
REQUEST_COLUMNS = (
    "model", "stream", "max_tokens", *SAMPLING_COLUMNS, "stop_present", "tools_count", "tool_choice",
    "structured_output", "server_state", "content_messages", "content_prompt", "content_tools",
    "content_response_format", "content_system",
)  # fmt: skip
# What a replay measures anew, with the trace's meaning (llmreplay.run_format) ...
MEASURED_COLUMNS = (
    "http_status", "error_kind", "retry_after_ms", "prompt_tokens", "completion_tokens", "cached_tokens",
    "token_source", "tool_calls_count", "ttfb_ns", "ttft_ns", "e2e_ns", "chunk_offsets_ns", "finish_reason",
)  # fmt: skip
# ... and the trace columns a run carries unchanged (the request as the trace describes it).
RUN_COPIED_COLUMNS = (
    "request_id", *SESSION_COLUMNS[:3], "arrival_time", "endpoint", "model", "stream", "tools_count",
    "tool_choice", "structured_output", "max_tokens",
)  # fmt: skip
# What replay planning, its checks and result rows read (replayer.plan.trace_rows) ...
PLANNING_COLUMNS = (
    "request_id", "arrival_time", "endpoint", "model", *SESSION_COLUMNS, "stream", "error_kind",
    "prompt_tokens", "completion_tokens", "max_tokens", "e2e_ns", "tools_count", "tool_choice",
    "structured_output", "n", "server_state", "token_source", "counted_prompt_tokens",
)  # fmt: skip
# ... of which a schedule is planned from these (replayer.plan.schedule).
SCHEDULE_COLUMNS = (
    "request_id", "session_id", "arrival_time", "turn_index", "think_time_ns", "stream", "error_kind",
    "completion_tokens", "e2e_ns",
)  # fmt: skip
# What compare reads from a trace; a run carries the same names.
COMPARED_COLUMNS = (
    "request_id", "arrival_time", "model", "stream", "tools_count", "http_status", "error_kind",
    "prompt_tokens", "completion_tokens", "cached_tokens", "ttft_ns", "e2e_ns", "chunk_offsets_ns",
    "ttfo_ns", "reasoning_tokens", "reasoning_ns",
)  # fmt: skip
# What a Mooncake export is written from (llmreplay.exporters).
MOONCAKE_EXPORT_COLUMNS = (
    "request_id", "session_id", "turn_index", "think_time_ns", "arrival_time", "endpoint", "prompt_tokens",
    "completion_tokens", "prefix_block_hashes",
)  # fmt: skip


def version_tuple(version: str) -> tuple[int, int]:
    """(major, minor) of a format version; ValueError for anything but 'MAJOR.MINOR' integers."""
    major, _, minor = str(version).partition(".")
    return int(major), int(minor or 0)


def major_version(version: str) -> int:
    return version_tuple(version)[0]


def refusal(version: str) -> str | None:
    """Why a reader of this format refuses a file of `version` (one line), or None: it reads it."""
    if major_version(version) in READABLE_MAJOR_VERSIONS:
        return None
    readable = ", ".join(f"{v}.x" for v in READABLE_MAJOR_VERSIONS)
    return f"trace format version {version} is not supported (this llmreplay reads {readable}); upgrade llmreplay"


def value_refusal(name: str, value: str, version: str) -> str | None:
    """Why a file of `version` may not hold `value` in column `name` (one line), or None."""
    since = VALUES_SINCE.get(name, {}).get(value)
    if since is None or version_tuple(since) <= version_tuple(version):
        return None
    return f"value {value!r} needs trace format {since} (the file says {version})"


def unknown_value_note(name: str, value: str, version: str) -> str:
    """What a stage that must act on a value this format does not know (a newer minor's) says."""
    return (
        f"{name} {value!r} is not in trace format {FORMAT_VERSION} (the file is format {version}): "
        f"upgrade llmreplay to one that reads {version}"
    )


def knows_every_value(version: str) -> bool:
    """Whether a file of `version` may hold only the vocabulary values this format knows (see the rule)."""
    return version_tuple(version) <= version_tuple(FORMAT_VERSION)


_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


def _datetime_to_us(value: datetime.datetime) -> int:
    return (value - _EPOCH) // datetime.timedelta(microseconds=1)


@dataclass(frozen=True, slots=True)
class TraceMeta:
    """File-level metadata, stored as JSON under one namespaced key in the Parquet footer.

    `relative_time` marks traces whose arrivals are offsets from an unknown origin (most public
    traces): their arrival_time counts from the Unix epoch and only differences are meaningful.
    """

    source: str
    block_size: int = DEFAULT_BLOCK_SIZE
    tokenizer: str | None = None
    content: bool = False
    anonymized: bool = False
    time_zone: str = "UTC"
    clock_domain: str = "gateway"
    relative_time: bool = False
    format_version: str = FORMAT_VERSION
    creator: str = "llmreplay"
    creator_version: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> bytes:
        data = dataclasses.asdict(self)
        if not data["creator_version"]:
            data["creator_version"] = _package_version()
        return json.dumps(data, sort_keys=True).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> TraceMeta:
        data = json.loads(raw)
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    def replace(self, **changes) -> TraceMeta:
        return dataclasses.replace(self, **changes)


def _package_version() -> str:
    from llmreplay import __version__

    return __version__
