"""OpenTelemetry GenAI client spans, from OTLP JSON exports (a collector's file exporter, an SDK's OTLP
JSON file exporter): one request per span, in start order. What spans cannot say is said in the metadata:
no prefix sharing, no chunk timing, no content, no message structure.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import orjson

from llmreplay.errors import BadInput
from llmreplay.importers.genai_span import (
    READ_ATTRIBUTES,
    SKIP_DUPLICATE,
    SKIP_NOT_GENAI,
    GenAISpan,
    read_span,
)
from llmreplay.importers.otlp_files import export_files, export_texts
from llmreplay.importers.otlp_json import SpanSelection, parse_export
from llmreplay.importers.source_request import SourceRead, SourceRequest, skip
from llmreplay.trace_format import DEFAULT_BLOCK_SIZE

NOT_IN_SOURCE = (
    "no prefix sharing (empty hashes), no chunk timing, no content, no message structure "
    "(one user message of the input tokens)"
)
TTFT_SOURCE = (
    "gen_ai.response.time_to_first_chunk: the first chunk, which may be a role-only chunk before any token"
)
# only spans with an operation name are decoded, only with the attributes read: content never is
GENAI_SPANS = SpanSelection("gen_ai.operation.name", READ_ATTRIBUTES)
STREAM_UNKNOWN = "unknown: assumed streamed"
E2E_SOURCE = "span duration (end - start), as the instrumented client measured it"


def read_otel(path: Path) -> SourceRead:
    # each span with its instrumentation: (resource service.name, scope name, scope version)
    spans: list[tuple[GenAISpan, tuple]] = []
    skipped: dict[str, list] = {}
    seen: set[tuple[str, str]] = set()
    files = export_files(path)
    for file in files:
        for where, export, left_out in _exports(file):
            for _ in range(left_out):
                skip(skipped, SKIP_NOT_GENAI, _short_where(where, path))
            for resource_spans in export.resource_spans:
                service = _service_name(resource_spans)
                for scope_spans in resource_spans.scope_spans:
                    scope = (service, scope_spans.scope.name, scope_spans.scope.version)
                    for span in scope_spans.spans:
                        found = read_span(span, where)
                        if isinstance(found, str):
                            skip(skipped, found, _short_where(where, path))
                        elif (found.trace_id, found.span_id) in seen:
                            skip(skipped, SKIP_DUPLICATE, _short_where(where, path))
                        else:
                            seen.add((found.trace_id, found.span_id))
                            spans.append((found, scope))
    if not spans:
        total = sum(len(lines) for lines in skipped.values())
        raise BadInput(f"{path}: no GenAI client spans (gen_ai.operation.name chat, text_completion, embeddings, "
                       f"generate_content) among {total} spans")  # fmt: skip
    spans.sort(key=lambda pair: pair[0].start_unix_ns)  # exporters write spans as they end
    requests, stream_counts = _requests(spans)
    with_ttft = sum(span.ttft_ns is not None for span, _ in spans)
    extra = {
        "not_in_source": NOT_IN_SOURCE,
        "files": len(files),
        "e2e_source": E2E_SOURCE,
        "ttft_source": TTFT_SOURCE,
        "spans_with_ttft": with_ttft,
        "stream_source": dict(stream_counts),
        "notes": _notes(len(spans), with_ttft, stream_counts),
        "messages": "one user message of gen_ai.usage.input_tokens tokens (spans carry no message structure)",
        "content": "not read: prompts and answers in span attributes or events are ignored",
        "spans_sorted_by_start": True,
    }
    return SourceRead(
        requests, skipped, DEFAULT_BLOCK_SIZE, relative_time=False, has_prefix_hashes=False, extra=extra
    )


def _exports(file: Path) -> Iterator:
    """(where, request, spans left out) per line; a file whose first line is not JSON by itself is read
    as one document."""
    texts = export_texts(file)
    first = next(texts, None)
    if first is None:
        raise BadInput(f"{file}: no JSON (only blank lines)")
    try:
        yield first.where, *parse_export(first.text, first.where, GENAI_SPANS)
    except BadInput as line_error:
        if _is_json(first.text):
            raise
        whole = "\n".join([first.text, *(text.text for text in texts)])
        if not _is_json(whole):
            raise line_error from None
        yield f"{file}", *parse_export(whole, f"{file}", GENAI_SPANS)
        return
    for text in texts:
        yield text.where, *parse_export(text.text, text.where, GENAI_SPANS)


def _is_json(text: str) -> bool:
    try:
        orjson.loads(text)
    except orjson.JSONDecodeError:
        return False
    return True


def _requests(spans: list[tuple[GenAISpan, tuple]]) -> tuple[list[SourceRequest], Counter]:
    """Stream: the span's own gen_ai.request.stream, else true when it carries a time to first chunk,
    else false when its instrumentation reports streaming on other spans, else unknown (assumed)."""
    reporting = {scope for span, scope in spans if span.stream is not None or span.ttft_ns is not None}
    counts: Counter = Counter()
    requests = []
    for ordinal, (span, scope) in enumerate(spans, start=1):
        stream, source = span.stream, "gen_ai.request.stream"
        if stream is None and span.ttft_ns is not None:
            stream, source = True, "time_to_first_chunk present"
        elif stream is None and scope in reporting:
            stream, source = False, "absent where its instrumentation reports streaming: false"
        elif stream is None:
            source = STREAM_UNKNOWN
        counts[source] += 1
        requests.append(
            SourceRequest(
                line=ordinal,
                arrival_us=span.start_unix_ns // 1000,
                prompt_tokens=span.prompt_tokens,
                completion_tokens=span.completion_tokens,
                session_id=span.session_id,
                e2e_ns=span.duration_ns,
                model=span.model,
                request_id=f"otel-{span.trace_id}-{span.span_id}",
                endpoint=span.endpoint,
                stream=stream,
                max_tokens=span.max_tokens,
                ttft_ns=span.ttft_ns,
                cached_tokens=span.cached_tokens,
                cache_write_tokens=span.cache_write_tokens,
            )
        )
    return requests, counts


def _notes(spans: int, with_ttft: int, stream_counts: Counter) -> list[str]:
    """Lines for the import summary: how much of TTFT and streaming the spans say."""
    notes = [f"TTFT: {with_ttft} of {spans} spans carry gen_ai.response.time_to_first_chunk"]
    unknown = stream_counts.get(STREAM_UNKNOWN, 0)
    if unknown:
        notes.append(
            f"stream: {unknown} of {spans} spans do not say (no gen_ai.request.stream): assumed streamed"
        )
    return notes


def _service_name(resource_spans) -> str | None:
    for pair in resource_spans.resource.attributes:
        if pair.key == "service.name":
            return pair.value.string_value
    return None


def _short_where(where: str, root: Path) -> str:
    """A skipped span's place, relative to the directory imported (its file name for a single file)."""
    base = root if root.is_dir() else root.parent
    return where.removeprefix(f"{base}/")
