"""One span per sent request, through the SDK's tracer with the run's own start and end times.

The SDK's spans take explicit start_time/end_time, so the real tracer is used; a synchronous processor
hands them to the exporter in batches of BATCH (BatchSpanProcessor would drop past its queue of 2048)
and stops at the first batch the collector refuses.
"""

from __future__ import annotations

from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.trace import SpanKind, Status, StatusCode

from llmreplay.otlp import semconv
from llmreplay.otlp.run_requests import RunRequests

BATCH = 2048
SPAN_COLUMNS = (
    "request_id", "session_id", "stream", "http_status", "error_kind", "finish_reason", "prompt_tokens",
    "completion_tokens", "cached_tokens", "reasoning_tokens", "requested_completion_tokens", "ttft_ns",
    "dispatch_lag_ns", "warmup",
)  # fmt: skip
G = semconv.SPAN


class BatchExport(SpanProcessor):
    """A SpanProcessor: ended spans go to `exporter` BATCH at a time; `failed` after a refused batch."""

    def __init__(self, exporter):
        self.exporter, self.batch, self.sent, self.failed = exporter, [], 0, False

    def on_start(self, span, parent_context=None) -> None:
        pass

    def on_end(self, span) -> None:
        self.batch.append(span)
        if len(self.batch) >= BATCH:
            self.flush()

    def flush(self) -> None:
        if self.batch and not self.failed:
            self.failed = self.exporter.export(self.batch) is not SpanExportResult.SUCCESS
            self.sent += 0 if self.failed else len(self.batch)
        self.batch = []

    def shutdown(self) -> None:
        self.flush()
        self.exporter.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        self.flush()
        return not self.failed


def send_spans(run: RunRequests, exporter, resource, scope) -> BatchExport:
    """Every sent request of `run` as a CLIENT span; stops early when the collector refuses a batch."""
    processor = BatchExport(exporter)
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(processor)
    tracer = provider.get_tracer(scope.name, scope.version, scope.schema_url, scope.attributes)
    names = [_span_name(attrs) for attrs in run.series_attributes]
    starts, ends, series = run.start_ns.tolist(), run.end_ns.tolist(), run.series.tolist()
    first = 0
    for batch in run.table.select(SPAN_COLUMNS).to_batches(max_chunksize=BATCH):  # dicts a batch at a time
        for i, row in enumerate(batch.to_pylist(), start=first):
            attributes = {**run.series_attributes[series[i]], **span_attributes(row)}
            span = tracer.start_span(
                names[series[i]], kind=SpanKind.CLIENT, attributes=attributes, start_time=starts[i]
            )
            if row["error_kind"] is not None:
                span.set_status(Status(StatusCode.ERROR, row["error_kind"]))
            span.end(end_time=ends[i])
        first += batch.num_rows
        if processor.failed:
            break
    provider.shutdown()
    return processor


def span_attributes(row: dict) -> dict:
    """The GenAI span attributes a result row knows (none of its content: there is none in a run)."""
    found = {
        "llmreplay.request.id": row["request_id"],
        G.GEN_AI_CONVERSATION_ID: row["session_id"],
        G.GEN_AI_REQUEST_STREAM: row["stream"],
        G.GEN_AI_REQUEST_MAX_TOKENS: row["requested_completion_tokens"],
        semconv.HTTP_STATUS: row["http_status"],
        G.GEN_AI_USAGE_INPUT_TOKENS: row["prompt_tokens"],
        G.GEN_AI_USAGE_OUTPUT_TOKENS: row["completion_tokens"],
        G.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: row["cached_tokens"],
        G.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS: row["reasoning_tokens"],
        G.GEN_AI_RESPONSE_FINISH_REASONS: [row["finish_reason"]] if row["finish_reason"] else None,
        G.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK: _seconds(row["ttft_ns"]),
        "llmreplay.dispatch_lag": _seconds(row["dispatch_lag_ns"]),
        "llmreplay.warmup": row["warmup"] or None,
    }
    return {key: value for key, value in found.items() if value is not None}


def _span_name(attributes: dict) -> str:
    """The semconv's `{gen_ai.operation.name} {gen_ai.request.model}`."""
    model = attributes.get(semconv.REQUEST_MODEL)
    operation = attributes[semconv.OPERATION_NAME]
    return f"{operation} {model}" if model else operation


def _seconds(ns: int | None) -> float | None:
    return None if ns is None else ns / 1e9
