"""One OTLP/JSON text -> an `ExportTraceServiceRequest` of opentelemetry-proto, decoded by protobuf's
json_format. OTLP/JSON differs from protobuf's JSON mapping in one way that matters: trace and span
ids are hex (protobuf's mapping would read them as base64); both spellings are accepted.
"""

from __future__ import annotations

import base64

import orjson
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from llmreplay.errors import BadInput

_ID_BYTES = {"traceId": 16, "spanId": 8, "parentSpanId": 8, "trace_id": 16, "span_id": 8, "parent_span_id": 8}
_OTHER_SIGNALS = {"resourceLogs": "logs", "resourceMetrics": "metrics", "resourceProfiles": "profiles"}


def parse_export(text: str, where: str) -> ExportTraceServiceRequest:
    """The request, or BadInput naming `where`: not JSON, not an OTLP trace export, or not its schema."""
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
    _hex_ids_to_base64(resource_spans)
    try:
        return json_format.ParseDict(value, ExportTraceServiceRequest(), ignore_unknown_fields=True)
    except (json_format.ParseError, ValueError, TypeError, RecursionError) as exc:
        raise BadInput(f"{where}: not an OTLP trace export ({_short(exc)})") from None


def _hex_ids_to_base64(resource_spans) -> None:
    """Rewrite hex ids in place (spans and their links); anything malformed is left to ParseDict to refuse."""
    for resource in _dicts(resource_spans):
        for scope in _dicts(resource.get("scopeSpans", resource.get("scope_spans"))):
            for span in _dicts(scope.get("spans")):
                _rewrite(span)
                for link in _dicts(span.get("links")):
                    _rewrite(link)


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
