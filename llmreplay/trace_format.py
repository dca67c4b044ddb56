"""Trace format v1: the one definition of the columns every stage reads and writes.

One row per request. This module owns the schema, its version, the record type and the
file metadata; it imports nothing from the stages (recorder, anonymizer, replayer).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from llmreplay.error_kinds import ERROR_KINDS, error_kind_for_status  # noqa: F401 (re-exported: part of the format)

FORMAT_VERSION = "1.1"  # 1.1 added invalid_fields
READABLE_MAJOR_VERSIONS = (1,)
METADATA_KEY = b"llmreplay"
DEFAULT_BLOCK_SIZE = 512

ENDPOINTS = ("chat_completions", "completions", "embeddings", "responses")
TOKEN_SOURCES = ("server_usage", "tokenizer", "imported")
STRUCTURED_OUTPUT_KINDS = ("none", "json_object", "json_schema")
TOOL_CHOICES = ("auto", "none", "required", "function")

TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")

MESSAGE_SHAPE_TYPE = pa.struct([("role", pa.string()), ("tokens", pa.int32())])

# (name, type, nullable) — the order is the column order in files.
SHAPE_COLUMNS: tuple[tuple[str, pa.DataType, bool], ...] = (
    ("request_id", pa.string(), False),
    ("session_id", pa.string(), True),
    ("turn_index", pa.int32(), False),
    ("parent_request_id", pa.string(), True),
    ("think_time_ns", pa.int64(), True),
    ("arrival_time", TIMESTAMP_TYPE, False),
    ("endpoint", pa.string(), False),
    ("model", pa.string(), True),
    ("stream", pa.bool_(), False),
    ("user_id", pa.string(), True),
    ("api_key_hash", pa.string(), True),
    ("http_status", pa.int16(), True),
    ("error_kind", pa.string(), True),
    ("retry_after_ms", pa.int64(), True),
    ("prompt_tokens", pa.int32(), False),
    ("completion_tokens", pa.int32(), True),
    ("cached_tokens", pa.int32(), True),
    ("token_source", pa.string(), False),
    ("max_tokens", pa.int32(), True),
    ("temperature", pa.float32(), True),
    ("top_p", pa.float32(), True),
    ("n", pa.int16(), True),
    ("stop_present", pa.bool_(), False),
    ("seed", pa.int64(), True),
    ("tools_count", pa.int16(), False),
    ("tool_definition_tokens", pa.int32(), False),
    ("tool_choice", pa.string(), True),
    ("tool_calls_count", pa.int16(), False),
    ("structured_output", pa.string(), False),
    ("schema_tokens", pa.int32(), False),
    ("messages", pa.list_(MESSAGE_SHAPE_TYPE), False),
    ("prefix_block_hashes", pa.list_(pa.int64()), False),
    ("ttfb_ns", pa.int64(), True),
    ("ttft_ns", pa.int64(), True),
    ("e2e_ns", pa.int64(), True),
    ("chunk_offsets_ns", pa.list_(pa.int64()), True),
    ("finish_reason", pa.string(), True),
    ("invalid_fields", pa.list_(pa.string()), True),  # fields nulled because the value was out of range
)
# Columns added by a minor version: files written before it lack them, and readers fill them with nulls.
ADDED_COLUMNS = {"invalid_fields": "1.1"}

# Present in a "content" trace only. JSON text exactly as the client sent / the engine answered.
CONTENT_COLUMNS: tuple[tuple[str, pa.DataType, bool], ...] = (
    ("content_messages", pa.string(), True),  # JSON array of chat messages (chat endpoints)
    ("content_prompt", pa.string(), True),  # JSON of the `prompt` field (completions endpoint)
    ("content_tools", pa.string(), True),  # JSON array of tool definitions
    ("content_response_format", pa.string(), True),  # JSON of response_format
    ("content_response", pa.string(), True),  # generated text of choice 0
    ("content_tool_calls", pa.string(), True),  # JSON array of returned tool calls
)

SHAPE_COLUMN_NAMES = tuple(name for name, _, _ in SHAPE_COLUMNS)
CONTENT_COLUMN_NAMES = tuple(name for name, _, _ in CONTENT_COLUMNS)
# Columns whose values come from a closed vocabulary; readers refuse anything else.
ENUM_COLUMNS = {
    "endpoint": ENDPOINTS,
    "token_source": TOKEN_SOURCES,
    "structured_output": STRUCTURED_OUTPUT_KINDS,
    "error_kind": ERROR_KINDS,
}
NON_NEGATIVE_COLUMNS = (
    "turn_index",
    "think_time_ns",
    "prompt_tokens",
    "completion_tokens",
    "cached_tokens",
    "max_tokens",
    "tools_count",
    "tool_definition_tokens",
    "tool_calls_count",
    "schema_tokens",
    "ttfb_ns",
    "ttft_ns",
    "e2e_ns",
    "retry_after_ms",
)
# Largest duration a trace may hold: 2**53 ns (about 104 days), exact as a float64, so every stage
# may compute with it in floats. Arrivals are bounded the same way (2**53 us: the year 2255).
MAX_DURATION_NS = 1 << 53
MAX_ARRIVAL_US = 1 << 53
# Upper bounds tighter than a column's Arrow width (list columns: every item). Readers refuse larger
# values; writers (llmreplay.trace_values) null them and name them in invalid_fields.
UPPER_BOUNDS = {
    "think_time_ns": MAX_DURATION_NS,
    "ttfb_ns": MAX_DURATION_NS,
    "ttft_ns": MAX_DURATION_NS,
    "e2e_ns": MAX_DURATION_NS,
    "chunk_offsets_ns": MAX_DURATION_NS,
    "retry_after_ms": MAX_DURATION_NS // 1_000_000,
    "arrival_time": MAX_ARRIVAL_US,
}


def _fields(columns) -> list[pa.Field]:
    return [pa.field(name, dtype, nullable=nullable) for name, dtype, nullable in columns]


def trace_schema(with_content: bool) -> pa.Schema:
    """The Arrow schema of a shape trace, or of a content trace when `with_content`."""
    columns = SHAPE_COLUMNS + CONTENT_COLUMNS if with_content else SHAPE_COLUMNS
    return pa.schema(_fields(columns))


@dataclass(frozen=True, slots=True)
class MessageShape:
    role: str
    tokens: int


@dataclass(frozen=True, slots=True)
class TraceRecord:
    """One request as a typed object; field names are the column names."""

    request_id: str
    arrival_time_us: int  # microseconds since the Unix epoch, UTC
    endpoint: str
    prompt_tokens: int
    token_source: str
    session_id: str | None = None
    turn_index: int = 0
    parent_request_id: str | None = None
    think_time_ns: int | None = None
    model: str | None = None
    stream: bool = False
    user_id: str | None = None
    api_key_hash: str | None = None
    http_status: int | None = None
    error_kind: str | None = None
    retry_after_ms: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    n: int | None = None
    stop_present: bool = False
    seed: int | None = None
    tools_count: int = 0
    tool_definition_tokens: int = 0
    tool_choice: str | None = None
    tool_calls_count: int = 0
    structured_output: str = "none"
    schema_tokens: int = 0
    messages: tuple[MessageShape, ...] = ()
    prefix_block_hashes: tuple[int, ...] = ()
    ttfb_ns: int | None = None
    ttft_ns: int | None = None
    e2e_ns: int | None = None
    chunk_offsets_ns: tuple[int, ...] | None = None
    finish_reason: str | None = None
    invalid_fields: tuple[str, ...] | None = None
    content_messages: str | None = None
    content_prompt: str | None = None
    content_tools: str | None = None
    content_response_format: str | None = None
    content_response: str | None = None
    content_tool_calls: str | None = None

    def to_row(self) -> dict[str, Any]:
        """A dict keyed by column name, ready for `pa.Table.from_pylist`."""
        row = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        row["arrival_time"] = row.pop("arrival_time_us")
        row["messages"] = [{"role": m.role, "tokens": m.tokens} for m in self.messages]
        row["prefix_block_hashes"] = list(self.prefix_block_hashes)
        if self.chunk_offsets_ns is not None:
            row["chunk_offsets_ns"] = list(self.chunk_offsets_ns)
        if self.invalid_fields is not None:
            row["invalid_fields"] = list(self.invalid_fields)
        return row

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> TraceRecord:
        """Inverse of `to_row`; accepts rows read back from Parquet (`to_pylist`)."""
        values = dict(row)
        arrival = values.pop("arrival_time")
        values["arrival_time_us"] = arrival if isinstance(arrival, int) else _datetime_to_us(arrival)
        values["messages"] = tuple(MessageShape(m["role"], m["tokens"]) for m in values.get("messages") or ())
        values["prefix_block_hashes"] = tuple(values.get("prefix_block_hashes") or ())
        for name in ("chunk_offsets_ns", "invalid_fields"):
            if values.get(name) is not None:
                values[name] = tuple(values[name])
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in known})


def _datetime_to_us(value) -> int:
    delta = value - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _epoch():
    import datetime

    return datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


_EPOCH = _epoch()


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


def major_version(version: str) -> int:
    return int(str(version).split(".", 1)[0])


def _package_version() -> str:
    from llmreplay import __version__

    return __version__
