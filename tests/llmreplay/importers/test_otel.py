"""`import otel` in-process: GenAI spans of the real OpenTelemetry SDK tracer at hand-checkable times, in
every form an OTLP JSON export takes (collector lines, protobuf's own JSON, one document, gzip, zstd in both
of the collector's framings, a directory); and hostile files, each one line naming the file and line,
exit 2, no trace written. The SDK + openai instrumentation + sim path is tests/e2e/importers/test_otel.py.
"""

from __future__ import annotations

import base64
import gzip
import json
import math
import struct
from pathlib import Path

import pytest
from backports import zstd
from click.testing import CliRunner
from google.protobuf import json_format
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, Status, StatusCode
from otlp_json_files import hex_ids

from llmreplay.cli import cli
from llmreplay.errors import BadInput
from llmreplay.importers.config import ImportConfig
from llmreplay.importers.pipeline import import_trace_file
from llmreplay.trace_format import MAX_DURATION_NS
from llmreplay.trace_io import read_trace

T0_NS = 1_760_000_000_000_000_000  # 2025-10-09, a wall-clock start
S = 1_000_000_000


def run(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def genai(operation: str, start_s: float, end_s: float, kind=SpanKind.CLIENT, error=False, **attributes):
    return dict(
        operation=operation, start_s=start_s, end_s=end_s, kind=kind, error=error, attributes=attributes
    )


# what the SDK records; the import takes 4 requests (the second turn plain: its scope reports streaming)
SPANS = [
    genai("chat", 0, 1.5, **{"gen_ai.request.model": "m", "gen_ai.usage.input_tokens": 100,
          "gen_ai.usage.output_tokens": 20, "gen_ai.request.max_tokens": 64, "gen_ai.request.stream": True,
          "gen_ai.response.time_to_first_chunk": 0.25, "gen_ai.conversation.id": "c1",
          "gen_ai.usage.cache_read.input_tokens": 60}),
    genai("chat", 3, 4, **{"gen_ai.request.model": "m", "gen_ai.usage.input_tokens": 180,
          "gen_ai.usage.output_tokens": 30, "gen_ai.conversation.id": "c1",
          "gen_ai.input.messages": "[{\"role\": \"user\", \"content\": \"secret\"}]"}),
    genai("embeddings", 0.5, 0.6, **{"gen_ai.request.model": "e", "gen_ai.usage.input_tokens": 12}),
    genai("chat", 2, 2.5, **{"gen_ai.provider.name": "anthropic", "gen_ai.response.model": "claude",
          "gen_ai.usage.input_tokens": 40, "gen_ai.usage.output_tokens": 5}),
    genai("execute_tool", 1, 1.1, **{"gen_ai.tool.name": "search"}),
    genai("chat", 1, 2, kind=SpanKind.SERVER, **{"gen_ai.usage.input_tokens": 1}),
    genai("chat", 1, 2, error=True, **{"gen_ai.usage.input_tokens": 1}),
    genai("http get", 0, 9),
]  # fmt: skip


def sdk_spans(specs=SPANS):
    """The specs as the SDK's ReadableSpans, recorded by a real tracer at the given times."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "svc"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("gateway", "1.0")
    for spec in specs:
        attributes = dict(spec["attributes"])
        if spec["operation"] != "http get":
            attributes["gen_ai.operation.name"] = spec["operation"]
        span = tracer.start_span(
            spec["operation"],
            kind=spec["kind"],
            attributes=attributes,
            start_time=T0_NS + round(spec["start_s"] * S),
        )
        if spec["error"]:
            span.set_status(Status(StatusCode.ERROR))
        span.end(end_time=T0_NS + round(spec["end_s"] * S))
    provider.shutdown()
    return exporter.get_finished_spans()


def collector_line(spans) -> str:
    data = json_format.MessageToDict(encode_spans(spans), use_integers_for_enums=True)
    hex_ids(data)
    return json.dumps(data, separators=(",", ":"))


def protobuf_line(spans) -> str:
    return json_format.MessageToJson(encode_spans(spans), indent=None)


def frames(lines: list[str]) -> bytes:
    """The collector file exporter's legacy `compression: zstd`: a 4-byte big-endian length per zstd frame."""
    packed = [zstd.compress(line.encode()) for line in lines]
    return b"".join(struct.pack(">I", len(frame)) + frame for frame in packed)


def write_form(folder: Path, form: str) -> Path:
    spans = sdk_spans()
    halves = [spans[:4], spans[4:]]  # two export batches
    lines = [collector_line(batch) for batch in halves]
    text = "\n".join(lines) + "\n"
    path = folder / f"traces-{form}.json"
    if form == "collector lines":
        path.write_text(text)
    elif form == "protobuf json lines":
        path.write_text("\n".join(protobuf_line(batch) for batch in halves) + "\n")
    elif form == "one document":
        path.write_text(json_format.MessageToJson(encode_spans(spans), indent=2))
    elif form == "gzip":
        path.write_bytes(gzip.compress(text.encode()))
    elif form == "zstd stream":
        path.write_bytes(zstd.compress(text.encode()))
    elif form == "zstd frames":
        path.write_bytes(frames(lines))
    elif form == "directory":
        path = folder / "exports"
        path.mkdir()
        (path / "traces-2025-10-09T00-00-00.000.json").write_text(lines[0] + "\n")
        (path / "traces.json").write_text(lines[1] + "\n")
    return path


FORMS = [
    "collector lines",
    "protobuf json lines",
    "one document",
    "gzip",
    "zstd stream",
    "zstd frames",
    "directory",
]


@pytest.mark.parametrize("form", FORMS)
def test_every_export_form_gives_the_same_hand_checked_trace(tmp_path, form):
    source = write_form(tmp_path, form)
    result = run("import", "otel", str(source), "-o", str(tmp_path / "t.parquet"))
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(f"imported 4 of 8 spans, 1 sessions from {source}")
    assert "skipped 4 of 8 spans: " in result.stderr
    assert "1 GenAI 'execute_tool' spans (not a model call)" in result.stderr
    assert (
        "1 not client spans" in result.stderr
        and "1 failed" in result.stderr
        and "1 not GenAI" in result.stderr
    )
    records = list(read_trace(tmp_path / "t.parquet").records())
    got = [
        (r.endpoint, r.model, r.arrival_time - T0_NS // 1000, r.e2e_ns, r.ttft_ns, r.stream, r.prompt_tokens,
         r.completion_tokens, r.max_tokens, r.session_id, r.turn_index, r.think_time_ns)
        for r in records
    ]  # fmt: skip
    assert got == [
        ("chat_completions", "m", 0, 1_500_000_000, 250_000_000, True, 100, 20, 64, "c1", 0, None),
        ("embeddings", "e", 500_000, 100_000_000, None, False, 12, None, None, None, 0, None),
        ("messages", "claude", 2_000_000, 500_000_000, None, False, 40, 5, None, None, 0, None),
        (
            "chat_completions",
            "m",
            3_000_000,
            1_000_000_000,
            None,
            False,
            180,
            30,
            None,
            "c1",
            1,
            1_500_000_000,
        ),
    ]
    assert records[3].parent_request_id == records[0].request_id
    assert [r.cached_tokens for r in records] == [60, None, None, None]
    assert all(r.content_messages is None and r.prefix_block_hashes == () for r in records)


def test_a_span_exported_twice_is_one_request(tmp_path):
    line = collector_line(sdk_spans()[:1])
    (tmp_path / "twice.jsonl").write_text(f"{line}\n{line}\n")
    result = run("import", "otel", str(tmp_path / "twice.jsonl"), "-o", str(tmp_path / "t.parquet"))
    assert result.exit_code == 0
    assert "1 duplicates (same trace and span id) (lines twice.jsonl:2)" in result.stderr
    assert read_trace(tmp_path / "t.parquet").table.num_rows == 1


def test_the_metadata_says_what_spans_cannot(tmp_path):
    source = write_form(tmp_path, "collector lines")
    assert run("import", "otel", str(source), "-o", str(tmp_path / "t.parquet")).exit_code == 0
    extra = read_trace(tmp_path / "t.parquet").meta.extra
    assert extra["not_in_source"].startswith("no prefix sharing (empty hashes), no chunk timing, no content")
    assert extra["prefix_hashes"].startswith("absent")
    assert extra["stream_source"] == {
        "gen_ai.request.stream": 2,  # the streamed chat, and the embeddings call (never streamed)
        "absent where its instrumentation reports streaming: false": 2,
    }
    assert "stream_assumed" not in extra and "endpoint_assumed" not in extra
    assert (
        extra["spans_with_ttft"] == 1
        and extra["skipped"]["failed (status ERROR or error.type)"]["count"] == 1
    )


def one_span_export(**attributes) -> ExportTraceServiceRequest:
    span = Span(
        trace_id=bytes(range(16)),
        span_id=bytes(range(8)),
        name="chat m",
        kind=Span.SPAN_KIND_CLIENT,
        start_time_unix_nano=T0_NS,
        end_time_unix_nano=T0_NS + S,
    )
    span.attributes.append(KeyValue(key="gen_ai.operation.name", value=AnyValue(string_value="chat")))
    span.attributes.append(KeyValue(key="gen_ai.usage.input_tokens", value=AnyValue(int_value=10)))
    for key, value in attributes.items():
        if key in ("start_time_unix_nano", "end_time_unix_nano", "trace_id"):
            setattr(span, key, value)
            continue
        del_attribute(span, key)
        span.attributes.append(KeyValue(key=key, value=value))
    return ExportTraceServiceRequest(resource_spans=[ResourceSpans(scope_spans=[ScopeSpans(spans=[span])])])


def del_attribute(span: Span, key: str) -> None:
    for index, pair in enumerate(span.attributes):
        if pair.key == key:
            del span.attributes[index]
            return


GOOD = json_format.MessageToJson(one_span_export(), indent=None)
HOSTILE = {
    "not JSON": ("hello\n", ":1: not valid JSON"),
    "a JSON array": ("[1, 2]\n", ":1: expected an OTLP export object, got JSON list"),
    "a logs export": ('{"resourceLogs": []}\n', ":1: an OTLP logs export (no resourceSpans)"),
    "an old OTLP": ('{"resourceSpans": [{"instrumentationLibrarySpans": []}]}\n', ":1: OTLP before 1.0"),
    "a wrong schema": ('{"resourceSpans": "all of them"}\n', ":1: not an OTLP trace export"),
    "a bad second line": (
        f'{GOOD}\n{{"resourceSpans": [{{"scopeSpans": 3}}]}}\n',
        ":2: not an OTLP trace export",
    ),
    "no GenAI spans": ('{"resourceSpans": []}\n', ": no GenAI client spans"),
    "only blank lines": ("\n\n  \n", ": no JSON (only blank lines)"),
    "not UTF-8": (b"\xff\xfe\x00garbage\n", ":1: not UTF-8 text"),
    "truncated gzip": (gzip.compress(GOOD.encode())[:-12], "compressed data is truncated or corrupt"),
    "a corrupt zstd frame": (
        struct.pack(">I", 9) + b"\x28\xb5\x2f\xfd" + b"\0" * 5,
        ":record 1: not a zstd frame",
    ),
    "a short zstd frame": (frames([GOOD])[:-3], ":record 1: truncated"),
    "negative tokens": (
        one_span_export(**{"gen_ai.usage.input_tokens": AnyValue(int_value=-3)}),
        ":1: span 0001020304050607: gen_ai.usage.input_tokens is -3, not a token count",
    ),
    "tokens as text": (
        one_span_export(**{"gen_ai.usage.output_tokens": AnyValue(string_value="12")}),
        "gen_ai.usage.output_tokens is '12', not a token count",
    ),
    "an end before the start": (one_span_export(end_time_unix_nano=T0_NS - 1), "is before startTimeUnixNano"),
    "no start": (one_span_export(start_time_unix_nano=0), "startTimeUnixNano 0 is not a time"),
    "a year-long span": (
        one_span_export(end_time_unix_nano=T0_NS + MAX_DURATION_NS + 1),
        "longer than a trace may hold",
    ),
    "a TTFT past the end": (
        one_span_export(**{"gen_ai.response.time_to_first_chunk": AnyValue(double_value=2.0)}),
        "time_to_first_chunk is 2.0 s, outside the span's 1 s",
    ),
    "a NaN TTFT": (
        one_span_export(**{"gen_ai.response.time_to_first_chunk": AnyValue(double_value=math.nan)}),
        "time_to_first_chunk is nan, not a number of seconds",
    ),
    "more cached than input tokens": (
        one_span_export(**{"gen_ai.usage.cache_read.input_tokens": AnyValue(int_value=11)}),
        "11 cached input tokens of 10 input tokens",
    ),
    "stream as text": (
        one_span_export(**{"gen_ai.request.stream": AnyValue(string_value="yes")}),
        "gen_ai.request.stream is 'yes', not a boolean",
    ),
    "a short trace id": (one_span_export(trace_id=b"\1\2\3"), "trace id of 3 bytes"),
}


def hostile_file(tmp_path: Path, content) -> Path:
    path = tmp_path / "hostile.json"
    if isinstance(content, ExportTraceServiceRequest):
        content = json_format.MessageToJson(content, indent=None) + "\n"
    if isinstance(content, str):
        content = content.encode()
    path.write_bytes(content)
    return path


@pytest.mark.parametrize("case", HOSTILE)
def test_hostile_files_are_one_line_exit_2_and_no_trace(tmp_path, case):
    content, message = HOSTILE[case]
    source = hostile_file(tmp_path, content)
    result = run("import", "otel", str(source), "-o", str(tmp_path / "out" / "t.parquet"))
    (tmp_path / "out").mkdir(exist_ok=True)
    assert result.exit_code == 2, result.output
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert f"{source}" in result.stderr and message in result.stderr, result.stderr
    assert not list((tmp_path / "out").iterdir())


def test_an_empty_directory_and_an_empty_file_are_refused(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "zero.json").write_bytes(b"")
    for source, message in (
        (tmp_path / "empty", "directory holds no files"),
        (tmp_path / "zero.json", "empty file"),
    ):
        result = run("import", "otel", str(source), "-o", str(tmp_path / "t.parquet"))
        assert result.exit_code == 2 and message in result.stderr


def test_a_directory_is_refused_where_the_source_reads_one_file(tmp_path):
    result = run("import", "mooncake", str(tmp_path), "-o", str(tmp_path / "t.parquet"))
    assert result.exit_code == 2 and "is a directory (mooncake reads one file)" in result.stderr


# -- properties: whatever the values, an import is a trace or one BadInput line, never a traceback --------
VALUES = st.one_of(
    st.integers(min_value=-(2**63), max_value=2**63 - 1).map(lambda v: AnyValue(int_value=v)),
    st.floats(allow_nan=True, allow_infinity=True).map(lambda v: AnyValue(double_value=v)),
    st.text(max_size=8).map(lambda v: AnyValue(string_value=v)),
    st.booleans().map(lambda v: AnyValue(bool_value=v)),
    st.just(AnyValue()),
)
KEYS = (
    "gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens", "gen_ai.request.max_tokens", "gen_ai.request.stream",
    "gen_ai.response.time_to_first_chunk", "gen_ai.conversation.id", "gen_ai.request.model",
    "gen_ai.operation.name", "gen_ai.provider.name",
)  # fmt: skip
UINT64 = st.integers(min_value=0, max_value=2**64 - 1)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(values=st.dictionaries(st.sampled_from(KEYS), VALUES, max_size=5), start=UINT64, end=UINT64)
def test_any_attribute_values_give_a_bounded_trace_or_one_line(tmp_path, values, start, end):
    export = one_span_export(**values, start_time_unix_nano=start, end_time_unix_nano=end)
    source = hostile_file(tmp_path, export)
    out = tmp_path / "t.parquet"
    out.unlink(missing_ok=True)
    try:
        import_trace_file(ImportConfig("otel", source, out))
    except BadInput as exc:
        assert str(exc).startswith(str(source)) and "\n" not in str(exc)
        assert not out.exists()
        return
    (record,) = read_trace(out).records()
    assert record.arrival_time == start // 1000 and record.e2e_ns == end - start <= MAX_DURATION_NS
    assert 0 <= record.prompt_tokens < 2**31
    assert record.ttft_ns is None or record.ttft_ns <= record.e2e_ns


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(
        st.sampled_from(["resourceSpans", "scopeSpans", "spans", "traceId", "spanId", "attributes", "key",
                         "value", "intValue", "startTimeUnixNano", "kind", "links", "scope", "x"]),
        inner,
        max_size=4,
    ),
    max_leaves=20,
)  # fmt: skip


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(document=JSON)
def test_any_json_is_refused_in_one_line(tmp_path, document):
    source = hostile_file(tmp_path, json.dumps(document) + "\n")
    with pytest.raises(BadInput) as refused:
        import_trace_file(ImportConfig("otel", source, tmp_path / "t.parquet"))
    assert str(refused.value).startswith(str(source)) and "\n" not in str(refused.value)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(min_size=1, max_size=64))
def test_any_bytes_are_refused_in_one_line(tmp_path, data):
    source = hostile_file(tmp_path, data)
    with pytest.raises(BadInput) as refused:
        import_trace_file(ImportConfig("otel", source, tmp_path / "t.parquet"))
    assert str(refused.value).startswith(str(source)) and "\n" not in str(refused.value)


def test_hex_and_base64_ids_name_the_same_request(tmp_path):
    export = one_span_export()
    base64_line = json_format.MessageToJson(export, indent=None)
    hex_data = json_format.MessageToDict(export)
    hex_ids(hex_data)
    ids = []
    for name, text in (("b64.json", base64_line), ("hex.json", json.dumps(hex_data))):
        (tmp_path / name).write_text(text + "\n")
        assert (
            run("import", "otel", str(tmp_path / name), "-o", str(tmp_path / f"{name}.parquet")).exit_code
            == 0
        )
        ids.append([r.request_id for r in read_trace(tmp_path / f"{name}.parquet").records()])
    assert ids[0] == ids[1] == [f"otel-{bytes(range(16)).hex()}-{bytes(range(8)).hex()}"]
    assert base64.b64decode(
        json.loads(base64_line)["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["traceId"]
    )
