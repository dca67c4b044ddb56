"""One OTLP span -> the request it describes, by the GenAI semantic conventions (`gen_ai.*`), or why it is
skipped. The tables below are the mapping the docs print; values are checked here (bad ones are BadInput).
Content (`gen_ai.input.messages`, `gen_ai.output.messages`, prompt events) is never read.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from llmreplay.errors import BadInput
from llmreplay.trace_format import MAX_ARRIVAL_US, MAX_DURATION_NS

# gen_ai.operation.name -> the trace's endpoint; an operation not here is no model call (tools, agents)
OPERATIONS = {
    "chat": "chat_completions",
    "text_completion": "completions",
    "embeddings": "embeddings",
    "generate_content": "chat_completions",  # Gemini-style multimodal generation: replayed as chat
}
# (provider, operation) pairs whose API is not OpenAI's; provider from gen_ai.provider.name or gen_ai.system
PROVIDER_ENDPOINTS = {("anthropic", "chat"): "messages"}
# trace field -> attributes read, first present wins (older semconv names after the current ones)
ATTRIBUTES = {
    "model": ("gen_ai.request.model", "gen_ai.response.model"),
    "prompt_tokens": ("gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens"),
    "completion_tokens": ("gen_ai.usage.output_tokens", "gen_ai.usage.completion_tokens"),
    "cached_tokens": ("gen_ai.usage.cache_read.input_tokens",),
    "cache_write_tokens": ("gen_ai.usage.cache_creation.input_tokens",),
    "max_tokens": ("gen_ai.request.max_tokens",),
    "stream": ("gen_ai.request.stream",),
    "ttft_s": ("gen_ai.response.time_to_first_chunk",),
    "session_id": ("gen_ai.conversation.id",),
    "provider": ("gen_ai.provider.name", "gen_ai.system"),
}
CLIENT_KINDS = (Span.SPAN_KIND_CLIENT, Span.SPAN_KIND_INTERNAL, Span.SPAN_KIND_UNSPECIFIED)
INT32_MAX = (1 << 31) - 1
READ_ATTRIBUTES = frozenset(name for names in ATTRIBUTES.values() for name in names) | {
    "gen_ai.operation.name",
    "error.type",
}

SKIP_NOT_GENAI = "not GenAI spans (no gen_ai.operation.name)"
SKIP_SERVER = "not client spans (kind SERVER, PRODUCER or CONSUMER)"
SKIP_FAILED = "failed (status ERROR or error.type)"
SKIP_NO_INPUT_TOKENS = "without gen_ai.usage.input_tokens"
SKIP_DUPLICATE = "duplicates (same trace and span id)"


def skip_not_a_model_call(operation: str) -> str:
    return f"GenAI {operation[:40]!r} spans (not a model call)"


@dataclass(frozen=True, slots=True)
class GenAISpan:
    """What the trace takes from one GenAI client span; `stream` None: the span does not say."""

    trace_id: str  # hex
    span_id: str  # hex
    start_unix_ns: int
    duration_ns: int
    endpoint: str
    prompt_tokens: int
    completion_tokens: int | None
    cached_tokens: int | None
    cache_write_tokens: int | None
    model: str | None
    max_tokens: int | None
    stream: bool | None
    ttft_ns: int | None
    session_id: str | None


def read_span(span: Span, where: str) -> GenAISpan | str:
    """The span's request, or the reason it is skipped (one of the SKIP_* strings)."""
    attributes = attribute_values(span)
    operation = attributes.get("gen_ai.operation.name")
    if operation is None:
        return SKIP_NOT_GENAI
    where = f"{where}: span {span.span_id.hex() or '(no id)'}"
    if not isinstance(operation, str):
        raise BadInput(f"{where}: gen_ai.operation.name is {operation!r}, not a string")
    if operation not in OPERATIONS:
        return skip_not_a_model_call(operation)
    if span.kind not in CLIENT_KINDS:
        return SKIP_SERVER
    if span.status.code == Status.STATUS_CODE_ERROR or "error.type" in attributes:
        return SKIP_FAILED
    values = {field: _first(attributes, names) for field, names in ATTRIBUTES.items()}
    if values["prompt_tokens"] is None:
        return SKIP_NO_INPUT_TOKENS
    return _request(span, where, operation, values)


def _request(span: Span, where: str, operation: str, values: dict) -> GenAISpan:
    trace_id, span_id = _ids(span, where)
    start_ns, duration_ns = _times(span, where)
    ttft_ns = _ttft_ns(values["ttft_s"], duration_ns, where)
    stream = values["stream"]
    if stream is not None and not isinstance(stream, bool):
        raise BadInput(f"{where}: gen_ai.request.stream is {stream!r}, not a boolean")
    provider = values["provider"] if isinstance(values["provider"], str) else None
    endpoint = PROVIDER_ENDPOINTS.get((provider, operation), OPERATIONS[operation])
    prompt_tokens = _count(values["prompt_tokens"], "gen_ai.usage.input_tokens", where)
    cached_tokens = _count(values["cached_tokens"], "gen_ai.usage.cache_read.input_tokens", where)
    if cached_tokens is not None and cached_tokens > prompt_tokens:
        raise BadInput(f"{where}: {cached_tokens} cached input tokens of {prompt_tokens} input tokens")
    return GenAISpan(
        trace_id=trace_id,
        span_id=span_id,
        start_unix_ns=start_ns,
        duration_ns=duration_ns,
        endpoint=endpoint,
        prompt_tokens=prompt_tokens,
        completion_tokens=_count(values["completion_tokens"], "gen_ai.usage.output_tokens", where),
        cached_tokens=cached_tokens,
        cache_write_tokens=_count(
            values["cache_write_tokens"], "gen_ai.usage.cache_creation.input_tokens", where
        ),
        model=_text(values["model"], "gen_ai.request.model", where),
        max_tokens=_count(values["max_tokens"], "gen_ai.request.max_tokens", where),
        stream=False if endpoint == "embeddings" else stream,
        ttft_ns=ttft_ns,
        session_id=_text(values["session_id"], "gen_ai.conversation.id", where),
    )


def attribute_values(span: Span) -> dict[str, object]:
    """The span's gen_ai.* (and error.type) attributes as Python values; arrays and maps as a marker."""
    values = {}
    for pair in span.attributes:
        if pair.key in READ_ATTRIBUTES:
            kind = pair.value.WhichOneof("value")
            values[pair.key] = getattr(pair.value, kind) if kind in _SCALARS else _Unusable(kind)
    return values


_SCALARS = frozenset({"string_value", "bool_value", "int_value", "double_value"})


@dataclass(frozen=True, slots=True)
class _Unusable:
    kind: str | None  # an array, a map, bytes, or no value at all

    def __repr__(self) -> str:
        return f"<{self.kind or 'empty'} value>"


def _first(attributes: dict, names: tuple[str, ...]):
    """The first attribute of `names` present and not an empty string (a request model left blank)."""
    return next((attributes[name] for name in names if attributes.get(name, "") != ""), None)


def _ids(span: Span, where: str) -> tuple[str, str]:
    if len(span.trace_id) != 16 or len(span.span_id) != 8:
        raise BadInput(
            f"{where}: trace id of {len(span.trace_id)} bytes, span id of {len(span.span_id)} (want 16, 8)"
        )
    return span.trace_id.hex(), span.span_id.hex()


def _times(span: Span, where: str) -> tuple[int, int]:
    start, end = span.start_time_unix_nano, span.end_time_unix_nano
    if start == 0 or start // 1000 > MAX_ARRIVAL_US:
        raise BadInput(f"{where}: startTimeUnixNano {start} is not a time")
    if end < start:
        raise BadInput(f"{where}: endTimeUnixNano {end} is before startTimeUnixNano {start}")
    if end - start > MAX_DURATION_NS:
        raise BadInput(
            f"{where}: lasts {end - start} ns, longer than a trace may hold ({MAX_DURATION_NS} ns)"
        )
    return start, end - start


def _ttft_ns(seconds, duration_ns: int, where: str) -> int | None:
    if seconds is None:
        return None
    name = "gen_ai.response.time_to_first_chunk"
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not math.isfinite(seconds):
        raise BadInput(f"{where}: {name} is {seconds!r}, not a number of seconds")
    ttft_ns = round(seconds * 1e9)
    if not 0 <= ttft_ns <= duration_ns:
        raise BadInput(f"{where}: {name} is {seconds!r} s, outside the span's {duration_ns / 1e9:.9g} s")
    return ttft_ns


def _count(value, name: str, where: str) -> int | None:
    """A token count: an integer (or a whole double, as some SDKs send numbers) in 0..2**31-1."""
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= INT32_MAX:
        raise BadInput(f"{where}: {name} is {value!r}, not a token count")
    return value


def _text(value, name: str, where: str) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise BadInput(f"{where}: {name} is {value!r}, not a string")
    return str(value) or None
