"""`import otel` on spans the real stack makes: the openai SDK calling `llmreplay sim`, traced by the official
OpenAI instrumentation (opentelemetry-instrumentation-openai-v2) and, as a gateway would, by spans of the
SDK's own tracer that carry gen_ai.request.stream and time_to_first_chunk; written as OTLP JSON lines by the
SDK's OTLP encoder. The trace is checked row by row against what the client sent and the sim answered,
then replayed against the sim and compared with it (its E2E and TTFT as production's).
"""

from __future__ import annotations

import json
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import openai
import pytest
from click.testing import CliRunner
from in_process_sim import InProcessSim
from live_processes import llmreplay_cmd
from opentelemetry import baggage, context, trace
from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor
from otlp_json_files import CONVERSATION_KEY, tracer_provider
from replay_helpers import results, run_replay

from llmreplay.cli import cli
from llmreplay.trace_io import read_trace

pytestmark = pytest.mark.e2e  # the replay and compare are processes
MODEL = "sim-model"


@dataclass
class Call:
    """One client call: what it sent, what the sim answered, and the client's own clock around it."""

    kind: str  # "sdk" (the official instrumentation's span) or "gateway" (the test's semconv span)
    sent: dict
    usage: object = None
    session: str | None = None
    elapsed_ns: int = 0
    first_chunk_s: float | None = None
    spans: list = field(default_factory=list)


def _call(client: openai.OpenAI, call: Call) -> Call:
    create = client.completions.create if "prompt" in call.sent else client.chat.completions.create
    started = time.perf_counter_ns()
    answer = create(model=MODEL, **call.sent)
    if call.sent.get("stream"):
        for chunk in answer:
            if call.first_chunk_s is None:
                call.first_chunk_s = (time.perf_counter_ns() - started) / 1e9
            call.usage = chunk.usage or call.usage
    else:
        call.usage = answer.usage
    call.elapsed_ns = time.perf_counter_ns() - started
    return call


def _in_conversation(conversation: str):
    """Spans started until the token is detached carry the id (BaggageSpanProcessor copies it)."""
    return context.attach(baggage.set_baggage(CONVERSATION_KEY, conversation))


def _sdk_calls(client: openai.OpenAI, tracer: trace.Tracer) -> list[Call]:
    """Through the official instrumentation: plain, streamed, a two-turn conversation; and three spans
    the import skips (a stream without usage, a failed embeddings call, an application span)."""
    calls = [
        Call("sdk", {"messages": [{"role": "user", "content": "hello there"}], "max_tokens": 7}),
        Call(
            "sdk",
            {
                "messages": [{"role": "user", "content": "a streamed question"}],
                "max_tokens": 9,
                "stream": True,
                "stream_options": {"include_usage": True},
            },
        ),
    ]
    for call in calls:
        _call(client, call)
    token = _in_conversation("conv-1")
    try:
        with tracer.start_as_current_span("handle conversation turn pair"):  # not GenAI: skipped
            history = [{"role": "user", "content": "first turn of a conversation"}]
            for max_tokens in (5, 11):
                sent = {"messages": list(history), "max_tokens": max_tokens}
                calls.append(_call(client, Call("sdk", sent, session="conv-1")))
                history += [
                    {"role": "assistant", "content": "an answer"},
                    {"role": "user", "content": "and then?"},
                ]
    finally:
        context.detach(token)
    unusable = {"messages": [{"role": "user", "content": "no usage"}], "max_tokens": 4, "stream": True}
    _call(client, Call("sdk", unusable))  # its span has no token counts: skipped
    with pytest.raises(openai.NotFoundError):  # the sim serves no embeddings: a failed span, skipped
        client.embeddings.create(model=MODEL, input="an embedding")
    return calls


def _gateway_calls(client: openai.OpenAI, tracer: trace.Tracer) -> list[Call]:
    """Spans a gateway would write by the current semconv (stream, time to first chunk, text_completion),
    around uninstrumented calls."""
    calls = [
        Call("gateway", {"messages": [{"role": "user", "content": "gateway streamed"}], "max_tokens": 6,
                         "stream": True, "stream_options": {"include_usage": True}}, session="conv-2"),
        Call("gateway", {"messages": [{"role": "user", "content": "gateway plain"}], "max_tokens": 8},
             session="conv-2"),
        Call("gateway", {"prompt": "Once upon a time", "max_tokens": 10}),
    ]  # fmt: skip
    for call in calls:
        operation = "text_completion" if "prompt" in call.sent else "chat"
        with tracer.start_as_current_span(f"{operation} {MODEL}", kind=trace.SpanKind.CLIENT) as span:
            _call(client, call)
            span.set_attributes(_semconv_attributes(operation, call))
    return calls


def _semconv_attributes(operation: str, call: Call) -> dict:
    attributes = {
        "gen_ai.operation.name": operation,
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": MODEL,
        "gen_ai.request.max_tokens": call.sent["max_tokens"],
        "gen_ai.usage.input_tokens": call.usage.prompt_tokens,
        "gen_ai.usage.output_tokens": call.usage.completion_tokens,
        "gen_ai.conversation.id": call.session,
    }
    if call.sent.get("stream"):
        attributes["gen_ai.request.stream"] = True
        attributes["gen_ai.response.time_to_first_chunk"] = call.first_chunk_s
    return {k: v for k, v in attributes.items() if v is not None}


@pytest.fixture(scope="module")
def telemetry(tmp_path_factory):
    """The spans file, and the calls in the order they were made (the order of their spans' starts)."""
    folder = tmp_path_factory.mktemp("otel")
    spans_file = folder / "traces.jsonl"
    sim = InProcessSim("fast")
    url = sim.start()
    provider = tracer_provider(spans_file, batch_size=3)
    instrumentor = OpenAIInstrumentor()
    try:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="not-a-key", max_retries=0)
        instrumentor.instrument(tracer_provider=provider)
        try:
            calls = _sdk_calls(client, provider.get_tracer("app"))
        finally:
            instrumentor.uninstrument()
        calls += _gateway_calls(client, provider.get_tracer("gateway"))
        provider.force_flush()
        yield spans_file, calls, url
    finally:
        provider.shutdown()
        sim.stop()


def _import(spans: Path, trace_path: Path):
    result = CliRunner().invoke(
        cli, ["import", "otel", str(spans), "-o", str(trace_path)], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output + result.stderr
    return result


def test_spans_of_the_sdk_and_a_gateway_import_row_by_row(telemetry, tmp_path):
    spans_file, calls, _ = telemetry
    assert len(spans_file.read_text().splitlines()) >= 3  # batches of 3 spans: one line each
    result = _import(spans_file, tmp_path / "t.parquet")
    assert (
        result.stdout.splitlines()[0]
        == f"imported 7 of 10 spans, 2 sessions from {spans_file} -> {tmp_path / 't.parquet'}"
    )
    assert "not in the source: no prefix sharing (empty hashes), no chunk timing, no content" in result.stdout
    assert "stream: 4 of 7 spans do not say (no gen_ai.request.stream): assumed streamed" in result.stdout
    assert "TTFT: 1 of 7 spans carry gen_ai.response.time_to_first_chunk" in result.stdout
    skipped = result.stderr
    assert "skipped 3 of 10 spans:" in skipped and "1 failed (status ERROR or error.type)" in skipped
    assert "1 without gen_ai.usage.input_tokens" in skipped and "1 not GenAI spans" in skipped
    trace_file = read_trace(tmp_path / "t.parquet")
    records = list(trace_file.records())
    assert len(records) == len(calls)
    turns: dict[str, list] = {}
    for call, record in zip(calls, records, strict=True):
        assert record.model == MODEL and record.token_source == "imported"
        assert record.prompt_tokens == call.usage.prompt_tokens
        assert record.completion_tokens == call.usage.completion_tokens
        assert record.max_tokens == call.sent["max_tokens"]
        assert record.endpoint == ("completions" if "prompt" in call.sent else "chat_completions")
        if call.kind == "sdk":  # the instrumentation's span sits inside the client's own clock ...
            assert 0 < record.e2e_ns <= call.elapsed_ns
        else:  # ... the gateway's around it
            assert record.e2e_ns >= call.elapsed_ns
        assert record.prefix_block_hashes == () and record.chunk_offsets_ns is None
        assert [(m.role, m.tokens) for m in record.messages] == [("user", call.usage.prompt_tokens)]
        assert record.session_id == call.session
        assert record.request_id.startswith("otel-") and len(record.request_id) == 5 + 32 + 1 + 16
        if call.kind == "sdk":  # the official instrumentation says neither: assumed streamed, no TTFT
            assert record.stream is True and record.ttft_ns is None
        else:  # the gateway's spans say; a plain one is plain because its scope reports streaming
            assert record.stream is bool(call.sent.get("stream"))
            expected_ttft = call.first_chunk_s and round(call.first_chunk_s * 1e9)
            assert record.ttft_ns == expected_ttft or abs(record.ttft_ns - expected_ttft) <= 1
        if call.session:
            turns.setdefault(call.session, []).append(record)
    assert [r.arrival_time for r in records] == sorted(r.arrival_time for r in records)
    for session in turns.values():
        assert [r.turn_index for r in session] == list(range(len(session)))
        assert session[1].parent_request_id == session[0].request_id
        gap_ns = (session[1].arrival_time - session[0].arrival_time) * 1000 - session[0].e2e_ns
        assert abs(session[1].think_time_ns - max(gap_ns, 0)) <= 1000
    meta = trace_file.meta
    assert meta.source == "import:otel:traces.jsonl" and meta.relative_time is False
    assert meta.extra["prefix_hashes"].startswith("absent") and "stream_assumed" in meta.extra
    assert meta.extra["not_in_source"].startswith("no prefix sharing")
    assert "endpoint_assumed" not in meta.extra


def test_the_imported_trace_replays_against_the_sim_and_compares(telemetry, tmp_path):
    spans_file, calls, url = telemetry
    trace_path, out = tmp_path / "t.parquet", tmp_path / "run"
    _import(spans_file, trace_path)
    done = run_replay(trace_path, url, out, "--max-dispatch-lag", "1s")
    assert done.returncode in (0, 1), done.stderr[-2000:]
    rows = {row["request_id"]: row for row in results(out)}
    records = {r.request_id: r for r in read_trace(trace_path).records()}
    assert rows.keys() == records.keys()
    for request_id, row in rows.items():
        assert row["error_kind"] is None, row
        assert row["completion_tokens"] == records[request_id].completion_tokens
    compared = subprocess.run(
        llmreplay_cmd("compare", str(trace_path), str(out), "--json", "--max-dispatch-lag", "1s"),
        capture_output=True, text=True, timeout=90,
    )  # fmt: skip
    assert compared.returncode in (0, 1), compared.stderr[-2000:]
    result = json.loads(compared.stdout)
    production = result["sides"]["baseline"]
    assert (production["kind"], production["requests"], production["successful"]) == ("trace", 7, 7)
    assert production["clock_domain"] == "source" and result["apis"]["same"]
    assert not result["fidelity"]["unfaithful"], result["fidelity"]
    ttfts = [r.ttft_ns for r in records.values() if r.ttft_ns is not None]
    e2es = sorted(r.e2e_ns for r in records.values())
    latency = result["latency"]
    assert latency["ttft"]["baseline"]["count"] == len(ttfts) == 1  # the gateway's one streamed span
    assert latency["ttft"]["baseline"]["p50_ms"] == pytest.approx(ttfts[0] / 1e6)
    assert latency["e2e"]["baseline"]["count"] == len(e2es)
    assert latency["e2e"]["baseline"]["p50_ms"] == pytest.approx(e2es[len(e2es) // 2] / 1e6)
    assert latency["e2e"]["candidate"]["count"] == len(rows)
    assert result["verdict"]["status"] in ("pass", "fail")
