"""docs/extending.md's recipe for an API, followed for a toy API: one module (its readers, stream rules
and BODY) and one ENDPOINTS row, and nothing else, make the replay loop's reader and the reference
reading (the recorder's) read its stream alike, the replayer build its bodies, the recorder read
them back, the preflight spell its probe and the anonymizer count its items."""

from __future__ import annotations

import dataclasses
from types import ModuleType

import orjson
import pytest

from llmreplay.trace_format import MessageShape, TraceRecord
from llmreplay.trace_io import records_to_table
from llmreplay.wire import chat_api, endpoints
from llmreplay.wire.answer import Answer
from llmreplay.wire.api_body import ApiBody
from llmreplay.wire.channels import ANSWER, REASONING
from llmreplay.wire.dialects import DIALECTS, _row, typed_dialect
from llmreplay.wire.endpoints import Endpoint
from llmreplay.wire.message_text import PromptMessage
from llmreplay.wire.response import summarize_stream
from llmreplay.wire.stream_event import NO_FACTS, EventFacts, event_type
from llmreplay.wire.usage import parse_usage
from replayer.config import ScheduleConfig
from replayer.loop.sse import SseStream
from replayer.plan.prompt_synthesis import BlockSpeller, ExactTextWords
from replayer.plan.request_builder import BuildOptions, build_request
from replayer.plan.schedule import build_schedule, schedule_input

CHANNELS = {"toy.piece": ("piece", ANSWER), "toy.musing": ("musing", REASONING)}


def _channel(name, data):
    key, channel = CHANNELS.get(event_type(name, data), (None, None))
    return channel if key is not None and isinstance(data.get(key), str) and data[key] else None


def _facts(kind, data):
    if kind == "toy.begin":
        return EventFacts(response_id=data.get("id"))
    if kind == "toy.end":
        return EventFacts(usage=data.get("usage"), finish_reason=data.get("why"), done=True)
    return NO_FACTS


def _fold(kind, data, texts, thoughts, calls):
    key, channel = CHANNELS.get(kind, (None, None))
    if key is not None and isinstance(data.get(key), str):
        (texts if channel == ANSWER else thoughts).append(data[key])


def _request_messages(body):
    """The `preamble`, then each of the `turns` (chat messages)."""
    preamble = body.get("preamble")
    first = (PromptMessage("system", preamble),) if isinstance(preamble, str) else ()
    return first + chat_api.request_messages({"messages": body.get("turns")})


def _spell(spelled):
    system = [text for role, text in spelled if role == "system"]
    turns = [{"role": role, "content": text} for role, text in spelled if role != "system"]
    return {**({"preamble": "".join(system)} if system else {}), "turns": turns}


TOY = ModuleType("toy_api")  # the one module: what a file llmreplay/wire/toy_api.py would hold
vars(TOY).update(
    READS_AS=chat_api,  # its tools, tool_choice, format and length read as chat's
    request_messages=_request_messages,
    event_channel=_channel,
    response_id=lambda data: data.get("id"),
    answer=lambda data: Answer("", "", (), None, parse_usage(data.get("usage")), data.get("id")),
    END_EVENTS=("toy.end",),
    DELTA_RULES={name: (((key,), channel),) for name, (key, channel) in CHANNELS.items()},
    PARSED_EVENTS=("toy.begin",),
    owns_event=lambda kind: kind.startswith("toy."),
    event_facts=_facts,
    fold_text=_fold,
    BODY=ApiBody(
        "toy",
        builder="spelled",
        prompt_field="turns",
        system_field="preamble",
        spell=_spell,
        chat=chat_api.chat_view,
        limit_field="max_tokens",
        sampling=("temperature",),
        **{k: getattr(chat_api.BODY, k) for k in ("tool", "tool_name", "tool_choice", "formats", "format_fields")},
    ),
)
ROW = Endpoint("toy", "/v1/toy", "toy", TOY)  # the one row
EVENTS = [
    {"type": "toy.begin", "id": "toy_1"},
    {"type": "toy.musing", "musing": "hm"},
    {"type": "toy.piece", "piece": "Hel"},
    {"type": "toy.ping"},
    {"type": "toy.piece", "piece": "lo"},
    {"type": "toy.end", "why": "stop", "usage": {"prompt_tokens": 4, "completion_tokens": 3}},
]


@pytest.fixture
def toy(monkeypatch):
    """The row added to ENDPOINTS, and the lookups importing the table builds from it."""
    monkeypatch.setattr(endpoints, "ENDPOINTS", (*endpoints.ENDPOINTS, ROW))
    monkeypatch.setitem(endpoints.DIALECT_OF, ROW.name, ROW.dialect)
    monkeypatch.setitem(endpoints.REPLAY_PATHS, ROW.name, ROW.path)
    monkeypatch.setitem(DIALECTS, ROW.dialect, _row(ROW.dialect, ROW.api))
    return DIALECTS[ROW.dialect]


def test_a_toy_api_added_as_a_module_and_a_row_is_read_alike_by_both_sides(toy):
    assert typed_dialect("toy.piece") is toy and toy.typed_events
    payloads = [orjson.dumps(event) for event in EVENTS]
    sse = SseStream(0, "toy")
    for i, (event, payload) in enumerate(zip(EVENTS, payloads, strict=True)):
        sse.feed(f"event: {event['type']}\ndata: ".encode() + payload + b"\n\n", i)
    reference = summarize_stream(list(enumerate(payloads)))
    assert tuple(sse.chunk_offsets_ns) == reference.token_event_ns == (1, 2, 4)
    assert sse.reasoning_chunks == reference.reasoning_events == 1
    assert (reference.text, reference.reasoning_text) == ("Hello", "hm")
    assert (
        sse.usage == {"prompt_tokens": 4, "completion_tokens": 3}
        and parse_usage(sse.usage).completion_tokens == 3
    )
    assert (sse.done, sse.finish_reason, sse.response_id) == (
        True,
        "stop",
        "toy_1",
    ) and sse.missing_end() is None
    assert (reference.done_seen, reference.finish_reason, reference.response_id) == (True, "stop", "toy_1")


def _built(record: TraceRecord, speller=None):
    chat_row = dataclasses.replace(record, endpoint="chat_completions")  # the trace vocabulary has no toy
    plan = build_schedule(schedule_input(records_to_table([chat_row], False)), ScheduleConfig()).plans()[0]
    options = BuildOptions(engine="vllm", model=None, default_model="m")
    return build_request(record, plan, options, speller)


def test_the_replayer_builds_a_toy_body_the_recorder_reads_back(toy):
    from anonymizer.dialect_items import item_text
    from recorder.request_shape import parse_request

    shape = TraceRecord(
        request_id="r1", arrival_time=1, endpoint="toy", prompt_tokens=40, token_source="server_usage",
        messages=(MessageShape("system", 8), MessageShape("user", 32)), completion_tokens=5, temperature=0.5,
    )  # fmt: skip
    built = _built(shape, BlockSpeller(ExactTextWords(None), block_size=16))
    body = orjson.loads(built.body)
    assert built.path == "/v1/toy" and built.requested_completion_tokens == 5
    assert list(body)[:5] == ["model", "preamble", "turns", "stream", "max_tokens"]  # then vLLM's forcing
    assert [turn["role"] for turn in body["turns"]] == ["user"] and body["temperature"] == 0.5
    read = parse_request("toy", built.body)
    assert [m.role for m in read.messages] == ["system", "user"] and read.columns["max_tokens"] == 5
    assert orjson.loads(read.columns["content_messages"]) == body["turns"]
    assert orjson.loads(read.columns["content_system"]) == body["preamble"]
    assert item_text("toy")(body["turns"][0]) == ("user", body["turns"][0]["content"])  # chat's counting

    recorded = dataclasses.replace(
        shape, content_messages=read.columns["content_messages"], content_system=read.columns["content_system"]
    )
    assert orjson.loads(_built(recorded).body)["turns"] == body["turns"]  # recorded content sent as it was


def test_the_preflight_spells_a_toy_probe(toy):
    from llmreplay.engines import BY_NAME
    from replayer.preflight import TraceNeeds, _request

    needs = TraceNeeds(requests=1, generating=1, endpoint="toy", model="m", request_tokens=None, uses=())
    endpoint, body = _request(needs, BY_NAME["vllm"], 2, "Say hello.")
    assert endpoint == "toy" and body["turns"] == [{"role": "user", "content": "Say hello."}]
    assert body["max_tokens"] == 2
