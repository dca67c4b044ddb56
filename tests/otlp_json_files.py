"""Spans of the real OpenTelemetry SDK written as OTLP JSON files, the way a collector's file exporter
writes them: the SDK's own OTLP encoder (opentelemetry-exporter-otlp-proto-common) makes the protobuf
request, json_format makes its JSON, one line per export batch. OTLP/JSON spells trace and span ids in
hex and enums as integers (protobuf's own mapping: base64 and names), so `collector_style` rewrites those
two and nothing else; without it the file is what json_format alone writes (the importer reads both).
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

from google.protobuf import json_format
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.processor.baggage import BaggageSpanProcessor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

CONVERSATION_KEY = "gen_ai.conversation.id"  # carried as baggage, set on every span started under it
ID_FIELDS = ("traceId", "spanId", "parentSpanId")


class OtlpJsonLinesExporter(SpanExporter):
    """Appends one JSON line per export batch to `path`."""

    def __init__(self, path: Path, collector_style: bool = True):
        self.path = path
        self.collector_style = collector_style
        self.batches = 0

    def export(self, spans) -> SpanExportResult:
        request = encode_spans(spans)
        data = json_format.MessageToDict(request, use_integers_for_enums=self.collector_style)
        if self.collector_style:
            hex_ids(data)
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(data, separators=(",", ":")) + "\n")
        self.batches += 1
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


def hex_ids(data: dict) -> None:
    """OTLP/JSON's ids: hex where protobuf's JSON mapping writes base64 (spans and their links)."""
    for resource in data.get("resourceSpans", []):
        for scope in resource.get("scopeSpans", []):
            for span in scope.get("spans", []):
                for holder in (span, *span.get("links", [])):
                    for key in ID_FIELDS:
                        if key in holder:
                            holder[key] = base64.b64decode(holder[key]).hex()


def tracer_provider(path: Path, batch_size: int = 4, collector_style: bool = True) -> TracerProvider:
    """A provider exporting to `path` in batches of `batch_size` spans (flush it before reading the file),
    copying the conversation id from baggage onto every span (opentelemetry-processor-baggage)."""
    provider = TracerProvider(resource=Resource.create({"service.name": "gateway-under-test"}))
    provider.add_span_processor(BaggageSpanProcessor(lambda key: key == CONVERSATION_KEY))
    exporter = OtlpJsonLinesExporter(path, collector_style)
    provider.add_span_processor(
        BatchSpanProcessor(exporter, max_export_batch_size=batch_size, schedule_delay_millis=60_000)
    )
    return provider
