"""Every reader of the dialect table, fed arbitrary JSON in every field it reads, answers in its own
shape and never raises: the recorder fails open on a hostile body and the sim answers it with a 400."""

from __future__ import annotations

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from llmreplay.trace_format import SERVER_STATES, STRUCTURED_OUTPUT_KINDS, TOOL_CHOICES
from llmreplay.wire import messages_api
from llmreplay.wire.answer import Answer
from llmreplay.wire.channels import RESPONSES_DELTA_CHANNELS
from llmreplay.wire.dialects import _READERS, DIALECTS
from llmreplay.wire.message_text import PromptMessage
from llmreplay.wire.response import summarize_stream
from llmreplay.wire.stream_event import EventFacts
from replayer.loop.sse import SseStream

# The keys the dialects read, at any depth, so a hostile value lands where a reader looks for one.
KEYS = """messages system input instructions prompt tools tool_choice text format type schema json_schema
response_format output_format output_config max_tokens max_output_tokens max_completion_tokens
previous_response_id conversation id role content name arguments input_schema parameters function
description output summary call_id tool_calls thinking mode choices message delta usage status
incomplete_details reason stop_reason response item error index content_block partial_json""".split()
TYPES = """message function_call function_call_output custom_tool_call custom_tool_call_output reasoning
item_reference text thinking tool_use server_tool_use tool_result image json_schema json_object tool any
auto allowed_tools completed incomplete""".split()
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False),
    st.text(max_size=4),
    st.sampled_from(TYPES),
)
JSON = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(KEYS), inner, max_size=4),
    max_leaves=12,
)
BODIES = st.dictionaries(st.sampled_from(KEYS), JSON, max_size=6)
DIALECT_NAMES = st.sampled_from(sorted(DIALECTS))


def test_the_property_below_reads_every_reader_of_the_table():
    assert set(_READERS) == set(READ_CHECKS)


READ_CHECKS = {
    "request_messages": lambda found: all(
        isinstance(m, PromptMessage) and isinstance(m.role, str) and isinstance(m.text, str) for m in found
    ),
    "request_tools": lambda found: isinstance(found, tuple) and all(isinstance(t, dict) for t in found),
    "request_tool_choice": lambda found: found is None or found in TOOL_CHOICES,
    "request_format": lambda found: True,  # the API's own object as sent: any JSON value
    "request_structured": lambda found: (
        found[0] in STRUCTURED_OUTPUT_KINDS and isinstance(found[1], dict | None)
    ),
    "max_output_tokens": lambda found: found is None or type(found) is int,
    "server_state": lambda found: (
        (found[0] is None or found[0] in SERVER_STATES)
        and (found[1] is None) == (found[0] is None)
        and isinstance(found[1], str | None)
    ),
    "event_channel": lambda found: found is None or isinstance(found, str),
    "response_id": lambda found: found is None or isinstance(found, str),
    "answer": lambda found: isinstance(found, Answer),
}


def _read(reader: str, dialect, body: dict):
    if reader == "event_channel":
        return dialect.event_channel(body.get("type") if isinstance(body.get("type"), str) else None, body)
    return getattr(dialect, reader)(body)


@settings(max_examples=1200, deadline=None)
@given(DIALECT_NAMES, BODIES)
def test_every_reader_answers_any_json_body_in_its_own_shape(name, body):
    dialect = DIALECTS[name]
    for reader, check in READ_CHECKS.items():
        assert check(_read(reader, dialect, body)), reader
    role, text = dialect.item_text(body)  # the body as one prompt item
    assert isinstance(role, str) and isinstance(text, str)
    if dialect.event_facts is not None:
        for kind in ("response.created", "response.completed", "response.output_item.added", "error"):
            assert isinstance(dialect.event_facts(kind, body), EventFacts)
        for kind in ("message_start", "message_delta", "message_stop", "content_block_start"):
            assert isinstance(dialect.event_facts(kind, body), EventFacts)
    dialect.usage(body.get("usage"))


def test_messages_that_are_not_a_list_are_no_messages():
    for value in (True, 1, 2.5, {"role": "user", "content": "hi"}):
        assert DIALECTS["messages"].request_messages({"messages": value, "system": "S"}) == (("system", "S"),)
        assert DIALECTS["chat"].request_messages({"messages": value}) == ()
        assert DIALECTS["responses"].request_messages({"input": value}) == ()


EVENT_NAMES = st.sampled_from(
    [*messages_api.EVENT_TYPES, *RESPONSES_DELTA_CHANNELS, "response.created", "response.completed"]
    + ["response.output_item.added", "response.failed", "error"]
)
EVENTS = st.tuples(EVENT_NAMES, st.dictionaries(st.sampled_from(KEYS), JSON, max_size=5))


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(["responses", "messages", "chat"]), st.lists(EVENTS, max_size=6))
def test_hostile_stream_events_never_raise(name, events):
    """A server's events of known names holding any JSON: neither the replay loop's reader nor the
    reference reading raises. (They may stamp such malformed events differently: the loop finds a
    delta's tokens by a byte pattern, so e.g. a Messages delta without its `type` still counts.)"""
    reads = [f"event: {kind}\ndata: ".encode() + orjson.dumps(data) + b"\n\n" for kind, data in events]
    sse = SseStream(0, name)
    for i, read in enumerate(reads):
        sse.feed(read, i)
    sse.finish(len(reads))
    summarize_stream([(i, orjson.dumps(data)) for i, (_, data) in enumerate(events)])
