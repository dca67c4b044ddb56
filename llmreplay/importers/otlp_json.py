"""One OTLP/JSON text -> an `ExportTraceServiceRequest` of opentelemetry-proto, decoded by protobuf's
json_format. OTLP/JSON differs from protobuf's JSON mapping in one way that matters: trace and span
ids are hex (protobuf's mapping would read them as base64); both spellings are accepted. A selection
leaves out, before decoding, the spans without its marker attribute and what the reader never reads
(json_format costs ~0.1 ms a message: events, links and unread attributes would be most of the time).
"""

from __future__ import annotations

import base64
from dataclasses import dataclass

import orjson
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from llmreplay.errors import BadInput

_ID_BYTES = {"traceId": 16, "spanId": 8, "parentSpanId": 8, "trace_id": 16, "span_id": 8, "parent_span_id": 8}
_OTHER_SIGNALS = {"resourceLogs": "logs", "resourceMetrics": "metrics", "resourceProfiles": "profiles"}
_SPAN_FIELDS = frozenset(
    {"traceId", "spanId", "name", "kind", "startTimeUnixNano", "endTimeUnixNano", "status", "attributes"}
    | {"trace_id", "span_id", "start_time_unix_nano", "end_time_unix_nano"}
)


@dataclass(frozen=True, slots=True)
class SpanSelection:
    """Spans carrying attribute `marker` are decoded, with only the attributes in `keep` (and resources
    with only `resource_keep`); the others are counted, not decoded."""

    marker: str
    keep: frozenset[str]
    resource_keep: frozenset[str] = frozenset({"service.name"})


def parse_export(
    text: str, where: str, selection: SpanSelection | None = None
) -> tuple[ExportTraceServiceRequest, int]:
    """The request and how many spans the selection left out, or BadInput naming `where`: not JSON,
    not an OTLP trace export, or not its schema."""
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise BadInput(f"{where}: not valid JSON ({exc})") from None
    if not isinstance(value, dict):
        raise BadInput(f"{where}: expected an OTLP export object, got JSON {type(value).__name__}")
    resource_spans = value.get("resourceSpans", value.get("resource_spans"))
    if resource_spans is None:
        other = next((name for key, name in _OTHER_SIGNALS.items() if key in value), None)
        what = f"an OTLP {other} export" if other else "not an OTLP trace export"
        raise BadInput(f"{where}: {what} (no resourceSpans)")
    if isinstance(resource_spans, list) and any(
        isinstance(r, dict) and "instrumentationLibrarySpans" in r for r in resource_spans
    ):
        raise BadInput(
            f"{where}: OTLP before 1.0 (instrumentationLibrarySpans); export with a current collector"
        )
    left_out = _prepare(resource_spans, selection)
    try:
        request = json_format.ParseDict(value, ExportTraceServiceRequest(), ignore_unknown_fields=True)
    except (json_format.ParseError, ValueError, TypeError, RecursionError) as exc:
        raise BadInput(f"{where}: not an OTLP trace export ({_short(exc)})") from None
    return request, left_out


def _prepare(resource_spans, selection: SpanSelection | None) -> int:
    """Hex ids to base64 and, with a selection, spans and fields left out (in place); returns the spans
    left out. Anything malformed is left as it is, for ParseDict to refuse."""
    left_out = 0
    for resource in _dicts(resource_spans):
        if selection is not None:
            _trim_attributes(resource.get("resource"), selection.resource_keep)
        for scope in _dicts(resource.get("scopeSpans", resource.get("scope_spans"))):
            spans = scope.get("spans")
            if selection is not None and isinstance(spans, list):
                kept = [span for span in spans if not isinstance(span, dict) or _selected(span, selection)]
                left_out += len(spans) - len(kept)
                scope["spans"] = spans = kept
            for span in _dicts(spans):
                _rewrite(span)
                for link in _dicts(span.get("links")):
                    _rewrite(link)
    return left_out


def _selected(span: dict, selection: SpanSelection) -> bool:
    """Whether the span carries the marker; if so it is trimmed to the fields and attributes read."""
    attributes = span.get("attributes", [])
    if not isinstance(attributes, list):
        return True  # malformed: for ParseDict to refuse
    if not any(isinstance(a, dict) and a.get("key") == selection.marker for a in attributes):
        return False
    for name in [name for name in span if name not in _SPAN_FIELDS]:
        del span[name]
    _trim_attributes(span, selection.keep)
    return True


def _trim_attributes(holder, keep: frozenset[str]) -> None:
    if isinstance(holder, dict) and isinstance(holder.get("attributes"), list):
        holder["attributes"] = [
            a
            for a in holder["attributes"]
            if not (isinstance(a, dict) and isinstance(a.get("key"), str)) or a["key"] in keep
        ]


def _dicts(value) -> list[dict]:
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def _rewrite(holder: dict) -> None:
    for key, size in _ID_BYTES.items():
        value = holder.get(key)
        if isinstance(value, str) and len(value) == 2 * size:
            try:
                holder[key] = base64.b64encode(bytes.fromhex(value)).decode()
            except ValueError:
                pass  # not hex: left as base64, whose decoded length the span reader checks


def _short(exc: Exception) -> str:
    text = str(exc) or type(exc).__name__
    return text if len(text) <= 200 else text[:197] + "..."
