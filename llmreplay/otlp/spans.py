"""One span per sent request: the SDK's ReadableSpan with the run's own start and end times, sent by the
SDK's OTLP exporter BATCH at a time, stopping at the first batch the collector refuses.

Built directly rather than through a tracer: a tracer's sampling and attribute limits are of no use to
spans that already happened, and cost a third of the time (docs/benchmarks.md, OTLP export).
"""

from __future__ import annotations

from dataclasses import dataclass

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

from llmreplay.otlp import semconv
from llmreplay.otlp.run_requests import RunRequests

BATCH = 2048
SPAN_COLUMNS = (
    "request_id", "session_id", "stream", "http_status", "error_kind", "finish_reason", "prompt_tokens",
    "completion_tokens", "cached_tokens", "reasoning_tokens", "requested_completion_tokens", "ttft_ns",
    "dispatch_lag_ns", "warmup",
)  # fmt: skip
G = semconv.SPAN
UNSET = Status(StatusCode.UNSET)
SAMPLED = TraceFlags(TraceFlags.SAMPLED)


class RunResource(Resource):
    """The run's Resource with its hash kept: the SDK's encoder hashes every span's resource to group
    them, and Resource hashes by dumping its attributes to JSON each time (a quarter of the encoding)."""

    def __init__(self, attributes, schema_url: str | None = None):
        super().__init__(attributes, schema_url)
        self._kept_hash = super().__hash__()

    def __hash__(self) -> int:
        return self._kept_hash


@dataclass(slots=True)
class SpansSent:
    sent: int = 0
    failed: bool = False


def send_spans(run: RunRequests, exporter, resource: Resource, scope) -> SpansSent:
    """Every sent request of `run` as a CLIENT span in its own trace; stops when the collector refuses a batch."""
    resource = RunResource(resource.attributes, resource.schema_url)
    ids, done = RandomIdGenerator(), SpansSent()
    names = [_span_name(attrs) for attrs in run.series_attributes]
    starts, ends, series = run.start_ns.tolist(), run.end_ns.tolist(), run.series.tolist()
    first = 0
    for batch in run.table.select(SPAN_COLUMNS).to_batches(max_chunksize=BATCH):  # dicts a batch at a time
        spans = []
        for i, row in enumerate(batch.to_pylist(), start=first):
            context = SpanContext(ids.generate_trace_id(), ids.generate_span_id(), False, SAMPLED)
            error = row["error_kind"]
            spans.append(
                ReadableSpan(
                    names[series[i]],
                    context,
                    resource=resource,
                    attributes={**run.series_attributes[series[i]], **span_attributes(row)},
                    kind=SpanKind.CLIENT,
                    status=UNSET if error is None else Status(StatusCode.ERROR, error),
                    start_time=starts[i],
                    end_time=ends[i],
                    instrumentation_scope=scope,
                )
            )
        first += batch.num_rows
        if exporter.export(spans) is not SpanExportResult.SUCCESS:
            done.failed = True
            break
        done.sent += len(spans)
    exporter.shutdown()
    return done


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
