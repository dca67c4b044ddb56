"""The Responses and Anthropic Messages APIs anonymized: every text-bearing item and block rewritten with
its exact token count (as the dialect counts it), ids, signatures and images replaced, --verify passing;
a planted secret left in place is found; generated block structures hold the same properties."""

from __future__ import annotations

import base64
import json
import os

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from anonymizer.dialect_items import item_text, system_message
from anonymizer.pipeline import AnonymizeConfig, anonymize_trace
from anonymizer.verify import verify_anonymized
from llmreplay.prefix_hash import prefix_block_hashes
from llmreplay.tokenizers import load_tokenizer
from llmreplay.trace_format import MessageShape, TraceMeta, TraceRecord
from llmreplay.trace_io import read_trace, write_trace
from llmreplay.wire import messages_api, responses_api

TOKENIZER = load_tokenizer()
SECRET = "Zanzibarquokka"
SIGNATURE = base64.b64encode(os.urandom(180)).decode()
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC"
DIALECT = {
    "responses": (responses_api, "instructions", "input"),
    "messages": (messages_api, "system", "messages"),
}


def dialect_record(
    index, endpoint, system, items, *, session="s0", turn=0, parent=None, tools=None, **content
):
    """A row as the recorder writes one: per-message counts by the dialect's own request_messages."""
    module, system_key, items_key = DIALECT[endpoint]
    body = {items_key: items, **({system_key: system} if system is not None else {})}
    shapes, ids = [], []
    for message in module.request_messages(body):
        message_ids = TOKENIZER.encode(message.text) if message.text else []
        shapes.append(MessageShape(message.role, len(message_ids)))
        ids.extend(message_ids)
    return TraceRecord(
        request_id=f"req-{index}",
        arrival_time=1_700_000_000_000_000 + index * 1000,
        endpoint=endpoint,
        prompt_tokens=len(ids),
        token_source="tokenizer",
        session_id=session,
        turn_index=turn,
        parent_request_id=parent,
        tools_count=len(tools or ()),
        messages=tuple(shapes),
        prefix_block_hashes=tuple(prefix_block_hashes(ids, 16)),
        content_messages=json.dumps(items),
        content_system=None if system is None else json.dumps(system),
        content_tools=json.dumps(tools) if tools else None,
        **content,
    )


def write(path, records):
    meta = TraceMeta(source="gateway", block_size=16, tokenizer="mistral-tekken", content=True)
    return write_trace(path, records, meta)


def anonymize(tmp_path, source, mode="preserve"):
    key = tmp_path / "k.key"
    if not key.exists():
        key.write_bytes(os.urandom(32))
        key.chmod(0o600)
    out = tmp_path / "out.parquet"
    result = anonymize_trace(AnonymizeConfig(source, out, key_file=key, prefix_sharing=mode, force=True))
    return result, verify_anonymized(source, out, result.tokenizer_id, mode), out


def assert_exact(before: dict, after: dict) -> None:
    """Every item (and the system prompt) has its token count, counted as its dialect counts it."""
    counted = item_text(before["endpoint"])
    old, new = (orjson.loads(r["content_messages"]) for r in (before, after))
    if isinstance(old, str):  # a Responses string input: one user message
        old, new = [{"role": "user", "content": old}], [{"role": "user", "content": new}]
    if before["content_system"] is not None:
        old = [system_message(orjson.loads(before["content_system"])), *old]
        new = [system_message(orjson.loads(after["content_system"])), *new]
    assert [(counted(a)[0], TOKENIZER.count(counted(a)[1])) for a in old] == [
        (counted(b)[0], TOKENIZER.count(counted(b)[1])) for b in new
    ]


RESPONSES_TOOLS = [
    {
        "type": "function",
        "name": "lookup_order",
        "description": "Find an order of Initech's customer by its number",
        "parameters": {"type": "object", "properties": {"order": {"type": "integer"}}, "required": ["order"]},
    },
    {"type": "web_search"},
]
RESPONSES_FORMAT = {
    "type": "json_schema",
    "name": "verdict",
    "strict": True,
    "schema": {"type": "object", "properties": {"refund": {"type": "boolean"}}, "required": ["refund"]},
}


def responses_session() -> list[TraceRecord]:
    first = [
        {"role": "user", "content": f"Where is order 88231 of {SECRET} Appleseed?"},
        {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": "It was due Monday."}],
        },
    ]
    second = first + [
        {
            "type": "reasoning",
            "id": "rs_abc123",
            "summary": [{"type": "summary_text", "text": "The customer asks about a late parcel."}],
            "encrypted_content": SIGNATURE,
        },
        {
            "type": "function_call",
            "id": "fc_1",
            "call_id": "call_77",
            "name": "lookup_order",
            "arguments": '{"order":88231}',
        },
        {"type": "function_call_output", "call_id": "call_77", "output": "Shipped from Leeds on Friday."},
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "It left Leeds on Friday.", "annotations": []}],
        },
        {"role": "user", "content": "Thanks, and refund the postage?"},
    ]
    system = f"You are {SECRET}'s support agent. Be brief."
    kw = dict(tools=RESPONSES_TOOLS, content_response_format=json.dumps(RESPONSES_FORMAT))
    return [
        dialect_record(0, "responses", system, first, content_response="Let me look.", **kw),
        dialect_record(1, "responses", system, second, turn=1, parent="req-0", content_response="Yes.", **kw),
        dialect_record(2, "responses", None, "Just one string input here", session="s1"),
    ]


ANTHROPIC_TOOLS = [
    {
        "name": "get_weather",
        "description": "Weather at a place",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        "cache_control": {"type": "ephemeral"},
    }
]


def anthropic_session() -> list[TraceRecord]:
    system = [
        {"type": "text", "text": f"You help {SECRET} plan trips.", "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": "Answer in one line."},
    ]
    first = [
        {
            "role": "user",
            "content": [
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
                {"type": "text", "text": "Is it sunny in Reykjavik near this lake?"},
            ],
        }
    ]
    second = first + [
        {
            "role": "assistant",
            "content": [
                {
                    "type": "thinking",
                    "thinking": f"{SECRET} wants Reykjavik weather.",
                    "signature": SIGNATURE,
                },
                {"type": "redacted_thinking", "data": SIGNATURE[:90]},
                {"type": "text", "text": "Let me check."},
                {
                    "type": "tool_use",
                    "id": "toolu_01A",
                    "name": "get_weather",
                    "input": {"city": "Reykjavik", "days": 3},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_01A", "content": "Overcast, 4 degrees."},
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_01A",
                    "is_error": False,
                    "content": [{"type": "text", "text": "Wind 30 km/h from the north."}],
                },
            ],
        },
    ]
    return [
        dialect_record(0, "messages", system, first, tools=ANTHROPIC_TOOLS, content_response="Let me check."),
        dialect_record(1, "messages", system, second, turn=1, parent="req-0", tools=ANTHROPIC_TOOLS),
        dialect_record(2, "messages", "plain system", [{"role": "user", "content": "hi"}], session="s1"),
    ]


def anonymized_exactly(tmp_path, records, mode="preserve") -> tuple[list[dict], list[dict]]:
    """(rows before, rows after) of an anonymization that verified, every item at its count."""
    source = write(tmp_path / "in.parquet", records)
    result, report, out = anonymize(tmp_path, source, mode)
    assert result.miss_count == 0, result.misses
    assert report.ok, report.summary_lines()
    before, after = read_trace(source).table.to_pylist(), read_trace(out).table.to_pylist()
    for old, new in zip(before, after, strict=True):
        assert_exact(old, new)
    return before, after


def test_responses_items_are_rewritten_exactly_and_verify(tmp_path):
    _, after = anonymized_exactly(tmp_path, responses_session())
    items = orjson.loads(after[1]["content_messages"])
    reasoning, call, output = items[2], items[3], items[4]
    assert (
        len(reasoning["encrypted_content"]) == len(SIGNATURE) and reasoning["encrypted_content"] != SIGNATURE
    )
    assert call["call_id"] == output["call_id"] != "call_77" and call["name"] != "lookup_order"
    assert orjson.loads(after[1]["content_messages"])[:2] == orjson.loads(after[0]["content_messages"])
    assert after[0]["content_system"] == after[1]["content_system"]  # shared instructions stay shared
    assert isinstance(orjson.loads(after[2]["content_messages"]), str)  # a string input stays a string
    assert SECRET.lower() not in json.dumps(after, default=str).lower()


def test_anthropic_blocks_are_rewritten_exactly_and_verify(tmp_path):
    before, after = anonymized_exactly(tmp_path, anthropic_session())
    system = orjson.loads(after[0]["content_system"])
    assert [b["type"] for b in system] == ["text", "text"] and system[0]["cache_control"] == {
        "type": "ephemeral"
    }
    image = orjson.loads(after[0]["content_messages"])[0]["content"][0]
    assert image["source"]["media_type"] == "image/png" and image["source"]["data"] != PNG
    thinking, redacted, _, use = orjson.loads(after[1]["content_messages"])[1]["content"]
    assert len(thinking["signature"]) == len(SIGNATURE) and thinking["signature"] != SIGNATURE
    assert len(redacted["data"]) == 90 and redacted["data"] != SIGNATURE[:90]
    results = orjson.loads(after[1]["content_messages"])[2]["content"]
    assert use["id"] == results[0]["tool_use_id"] == results[1]["tool_use_id"] != "toolu_01A"
    assert results[1]["is_error"] is False and "Reykjavik" not in json.dumps(use["input"])
    tools = orjson.loads(after[0]["content_tools"])
    assert tools[0]["input_schema"]["type"] == "object" and tools[0]["name"] != "get_weather"
    assert TOKENIZER.count(after[0]["content_tools"]) == TOKENIZER.count(before[0]["content_tools"])
    assert SECRET.lower() not in json.dumps(after, default=str).lower()


def verify_with_thinking_edited(tmp_path, key: str, original: str):
    """Verify an output whose row 1 thinking block got `original` back under `key`."""
    source = write(tmp_path / "in.parquet", anthropic_session())
    _, report, out = anonymize(tmp_path, source)
    assert report.ok
    table = pq.read_table(out)
    column = table.column("content_messages").to_pylist()
    messages = orjson.loads(column[1])
    messages[1]["content"][0][key] = original
    column[1] = json.dumps(messages)
    index = table.schema.get_field_index("content_messages")
    pq.write_table(table.set_column(index, "content_messages", pa.array(column)), out)
    return verify_anonymized(source, out, "mistral-tekken", "preserve")


def test_a_planted_secret_left_in_a_thinking_block_is_found(tmp_path):
    report = verify_with_thinking_edited(tmp_path, "thinking", f"{SECRET} wants Reykjavik weather.")
    assert not report.ok and report.leaked_words > 0


def test_a_signature_kept_as_recorded_is_found(tmp_path):
    report = verify_with_thinking_edited(tmp_path, "signature", SIGNATURE)
    assert not report.ok and (report.leaked_spans > 0 or report.leaked_words > 0)


words = st.lists(
    st.sampled_from(["Reykjavik", "order", "42", "émigré", "東京", "\n", "{", "Appleseed", "", " "]),
    max_size=12,
).map(" ".join)
texts = st.one_of(words, st.text(max_size=80))
blocks = st.one_of(
    texts.map(lambda t: {"type": "text", "text": t}),
    texts.map(lambda t: {"type": "thinking", "thinking": t, "signature": SIGNATURE[: 20 + len(t) % 50]}),
    st.tuples(texts, st.integers(-(10**6), 10**6)).map(
        lambda v: {"type": "tool_use", "id": "toolu_x", "name": "find", "input": {"q": v[0], "n": v[1]}}
    ),
    st.one_of(texts, st.lists(texts.map(lambda t: {"type": "text", "text": t}), max_size=3)).map(
        lambda c: {"type": "tool_result", "tool_use_id": "toolu_x", "content": c}
    ),
)
anthropic_messages = st.lists(
    st.tuples(
        st.sampled_from(["user", "assistant"]), st.one_of(texts, st.lists(blocks, min_size=1, max_size=4))
    ),
    min_size=1,
    max_size=4,
).map(lambda ms: [{"role": r, "content": c} for r, c in ms])
responses_items = st.lists(
    st.one_of(
        texts.map(lambda t: {"role": "user", "content": t}),
        texts.map(
            lambda t: {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": t}],
            }
        ),
        texts.map(
            lambda t: {
                "type": "function_call",
                "call_id": "c1",
                "name": "find",
                "arguments": json.dumps({"q": t}),
            }
        ),
        texts.map(lambda t: {"type": "function_call_output", "call_id": "c1", "output": t}),
        texts.map(lambda t: {"type": "reasoning", "summary": [{"type": "summary_text", "text": t}]}),
    ),
    min_size=1,
    max_size=5,
)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    system=st.one_of(
        st.none(), texts, st.lists(texts.map(lambda t: {"type": "text", "text": t}), min_size=1, max_size=2)
    ),
    history=anthropic_messages,
    items=responses_items,
    mode=st.sampled_from(["preserve", "session"]),
)
def test_generated_block_structures_keep_counts_and_verify(tmp_path, system, history, items, mode):
    records = [
        dialect_record(0, "messages", system, history[:1]),
        dialect_record(1, "messages", system, history, turn=1, parent="req-0"),
        dialect_record(2, "responses", system if isinstance(system, str) else None, items, session="s1"),
    ]
    anonymized_exactly(tmp_path, records, mode)
