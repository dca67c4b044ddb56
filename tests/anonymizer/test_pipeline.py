"""Property tests: random conversations (unicode, code, JSON, empty, long, multimodal) anonymize with
exact counts and pass verification; a tampered output fails it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from anonymizer.pipeline import AnonymizeConfig, anonymize_trace
from anonymizer.verify import verify_anonymized
from llmreplay.trace_io import read_trace

CODE = 'def total(items):\n    return sum(i["price"] for i in items)  # TODO: tax\n'
JSON_TEXT = json.dumps({"customer": {"id": 4412, "tags": ["vip", "émigré"]}, "note": "call back"})

texts = st.one_of(
    st.text(max_size=300),  # arbitrary unicode, including empty
    st.sampled_from(
        ["", " ", "\n\n", CODE, JSON_TEXT, "😀 emoji ñandú 東京 Zürich", "a" * 50, "<s>[INST]</s>"]
    ),
    st.lists(st.sampled_from(["hello", "world", "refund", "order", "42", "!", "\n"]), max_size=40).map(
        " ".join
    ),
)
parts = st.one_of(
    texts.map(lambda t: {"type": "text", "text": t}),
    st.sampled_from(["low", "high", "auto"]).map(
        lambda d: {
            "type": "image_url",
            "image_url": {"url": "https://img.example.com/private/photo.png", "detail": d},
        }
    ),
)
user_messages = st.one_of(
    texts.map(lambda t: {"role": "user", "content": t}),
    st.lists(parts, min_size=1, max_size=4).map(lambda p: {"role": "user", "content": p}),
)
conversations = st.lists(
    st.tuples(user_messages, texts),  # (user message, assistant answer) per turn
    min_size=1,
    max_size=4,
)


def _trace_from(traces, path, system: str, sessions: list[list[tuple[dict, str]]], block_size: int):
    records, index = [], 0
    for s, turns in enumerate(sessions):
        history = [{"role": "system", "content": system}]
        parent = None
        for turn, (user, answer) in enumerate(turns):
            history = history + [user]
            record = traces.make_record(
                index,
                history,
                session=f"s{s}",
                turn=turn,
                parent=parent,
                response=answer,
                block_size=block_size,
            )
            records.append(record)
            parent = record.request_id
            history = history + [{"role": "assistant", "content": answer}]
            index += 1
    return traces.write_content_trace(path, records, block_size)


def _key(tmp_path):
    path = tmp_path / "k.key"
    if not path.exists():
        path.write_bytes(os.urandom(32))
        path.chmod(0o600)
    return path


def _run(tmp_path, source, mode="preserve", name="out.parquet"):
    out = tmp_path / name
    config = AnonymizeConfig(source, out, key_file=_key(tmp_path), prefix_sharing=mode, force=True)
    result = anonymize_trace(config)
    report = verify_anonymized(source, out, result.tokenizer_id, mode)
    return result, report, out


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@example(  # found by this test: the same text as a string and as a text part must share
    system="",
    sessions=[
        [({"role": "user", "content": " "}, "")],
        [({"role": "user", "content": [{"type": "text", "text": " "}]}, "")],
    ],
    block_size=4,
    mode="preserve",
)
@given(
    system=texts,
    sessions=st.lists(conversations, min_size=1, max_size=3),
    block_size=st.sampled_from([4, 16, 512]),
    mode=st.sampled_from(["preserve", "session", "none"]),
)
def test_random_conversations_keep_counts_sharing_and_leak_nothing(
    traces, tmp_path, system, sessions, block_size, mode
):
    source = _trace_from(traces, tmp_path / "in.parquet", system, sessions, block_size)
    result, report, out = _run(tmp_path, source, mode)
    assert result.miss_count == 0, result.misses
    assert report.ok, report.summary_lines()
    before, after = read_trace(source).table.to_pylist(), read_trace(out).table.to_pylist()
    for old, new in zip(before, after, strict=True):
        old_messages, new_messages = (
            orjson.loads(old["content_messages"]),
            orjson.loads(new["content_messages"]),
        )
        for a, b in zip(old_messages, new_messages, strict=True):
            if isinstance(a["content"], list):  # image parts keep type and count and lose their data
                assert [p["type"] for p in a["content"]] == [p["type"] for p in b["content"]]
                for part in b["content"]:
                    if part["type"] == "image_url":
                        assert part["image_url"]["url"].startswith("data:image/png;base64,")
                        assert "example.com" not in part["image_url"]["url"]


def test_very_long_message_and_shared_prefix_inside_a_message(traces, tmp_path):
    """A 20k-token document shared by two prompts that differ only at its end keeps its sharing."""
    document = " ".join(
        f"Clause {i}: the tenant shall pay rent to the landlord on day {i % 28}." for i in range(1200)
    )
    sessions = [
        [({"role": "user", "content": document + " Question: is clause 7 fair?"}, "Yes.")],
        [({"role": "user", "content": document + " Question: who pays for repairs?"}, "The landlord.")],
    ]
    source = _trace_from(traces, tmp_path / "in.parquet", "You review contracts.", sessions, 512)
    result, report, out = _run(tmp_path, source)
    assert report.ok and result.miss_count == 0, report.summary_lines()
    first, second = (
        orjson.loads(r["content_messages"])[1]["content"] for r in read_trace(out).table.to_pylist()
    )
    shared_chars = next(i for i, (a, b) in enumerate(zip(first, second, strict=False)) if a != b)
    assert shared_chars > 0.9 * len(first)  # the long common document stays a common prefix


def test_text_parts_share_prefixes_like_string_content(traces, tmp_path):
    """A document sent as a string, as one text part, or as parts around an image: production shares
    its tokens across all three, so the anonymized trace must too.
    """
    document = "Clause 4: the tenant pays the rent on the first day of each month. " * 12
    image = {"type": "image_url", "image_url": {"url": "https://img.example.com/p.png"}}
    sessions = [
        [({"role": "user", "content": document + "Is that fair?"}, "Yes.")],
        [({"role": "user", "content": [{"type": "text", "text": document + "Who pays repairs?"}]}, "Me.")],
        [({"role": "user", "content": [{"type": "text", "text": document}, image, "Late fees?"]}, "No.")],
    ]
    source = _trace_from(traces, tmp_path / "in.parquet", "You review contracts.", sessions, 16)
    result, report, out = _run(tmp_path, source)
    assert report.ok and result.miss_count == 0, (report.summary_lines(), result.misses)
    assert report.blocks_checked > 0 and report.sharing_violations == 0
    texts = []
    for row in read_trace(out).table.to_pylist():
        content = orjson.loads(row["content_messages"])[1]["content"]
        texts.append(content if isinstance(content, str) else content[0]["text"])
    shared = min(
        next(i for i, (a, b) in enumerate(zip(texts[0], other, strict=False)) if a != b)
        for other in texts[1:]
    )
    assert shared > 0.8 * len(texts[2])  # the document stays a common prefix of all three


def test_tool_calls_responses_items_and_completions_prompts(traces, tmp_path):
    calls = [
        {
            "id": "call_1",
            "type": "function",
            "function": {"name": "lookup_order", "arguments": '{"order_id": "A-1942", "verbose": true}'},
        }
    ]
    history = [
        {"role": "user", "content": "Where is order A-1942?", "name": "alice_w"},
        {"role": "assistant", "content": None, "tool_calls": calls},
        {"role": "tool", "tool_call_id": "call_1", "content": '{"status": "shipped", "eta": "Friday"}'},
        {"role": "assistant", "content": "It ships Friday.", "refusal": None},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Thanks!"},
                {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}},
            ],
        },
    ]
    truncated = [
        {
            "id": "call_2",
            "type": "function",
            "function": {"name": "lookup_order", "arguments": '{"order_id": "A-19'},
        }
    ]
    records = [
        traces.make_record(0, history, response="Anything else?", tool_calls=truncated),
        traces.make_record(1, None, prompt="def secret_function(x):\n    return x * 42"),
        traces.make_record(2, None, prompt=["first prompt about Alice", "second prompt about Bob"]),
    ]
    source = traces.write_content_trace(tmp_path / "in.parquet", records)
    table = pq.read_table(source)
    prompts = table.column("content_prompt").to_pylist()
    prompts.append(json.dumps([101, 2023, 2003, 1037]))
    rows = table.to_pylist()
    extra = dict(
        rows[1], request_id="req-3", arrival_time=rows[2]["arrival_time"], content_prompt=prompts[-1]
    )
    table = pa.Table.from_pylist([*rows, extra], schema=table.schema)
    pq.write_table(table, source)
    result, report, out = _run(tmp_path, source)
    assert report.ok and result.miss_count == 0, (report.summary_lines(), result.misses)
    after = read_trace(out).table.to_pylist()
    messages = orjson.loads(after[0]["content_messages"])
    assert (
        messages[0]["name"] != "alice_w" and messages[2]["tool_call_id"] == messages[1]["tool_calls"][0]["id"]
    )
    arguments = json.loads(messages[1]["tool_calls"][0]["function"]["arguments"])
    assert list(arguments.values())[1] is True and len(arguments) == 2
    assert messages[4]["content"][1] == {
        "type": "input_audio",
        "input_audio": messages[4]["content"][1]["input_audio"],
    }
    assert messages[4]["content"][1]["input_audio"]["data"] != "UklGRg=="
    assert len(json.loads(after[3]["content_prompt"])) == 4


def test_verification_fails_on_a_tampered_output(traces, tmp_path):
    sessions = [
        [({"role": "user", "content": "Please refund order 1234 for Jonathan Appleseed"}, "Done, Jonathan.")]
    ]
    source = _trace_from(traces, tmp_path / "in.parquet", "You are a refunds bot for Initech.", sessions, 16)
    _, report, out = _run(tmp_path, source)
    assert report.ok
    table = pq.read_table(out)
    original = pq.read_table(source)
    leaked = table.set_column(
        table.schema.get_field_index("content_messages"),
        "content_messages",
        original.column("content_messages"),
    )
    pq.write_table(leaked.replace_schema_metadata(table.schema.metadata), out)
    report = verify_anonymized(source, out, "mistral-tekken", "preserve")
    assert not report.ok and report.leaked_words > 0 and report.leaked_spans > 0
    messages = orjson.loads(table.column("content_messages")[0].as_py())
    messages[1]["content"] += " extra"
    shorter = table.set_column(
        table.schema.get_field_index("content_messages"), "content_messages", pa.array([json.dumps(messages)])
    )
    pq.write_table(shorter.replace_schema_metadata(table.schema.metadata), out)
    report = verify_anonymized(source, out, "mistral-tekken", "preserve")
    assert not report.ok and report.count_mismatches == 1


def test_verification_catches_broken_sharing(traces, tmp_path):
    system = "You are the shared system prompt of a large deployment. " * 4
    sessions = [[({"role": "user", "content": "one"}, "a")], [({"role": "user", "content": "two"}, "b")]]
    source = _trace_from(traces, tmp_path / "in.parquet", system, sessions, 4)
    _, report, out = _run(tmp_path, source, "session")
    assert report.ok  # session mode: sharing across sessions is meant to break
    report = verify_anonymized(source, out, "mistral-tekken", "preserve")
    assert not report.ok and report.sharing_violations > 0  # judged as preserve, that is a violation


@pytest.mark.parametrize("mode", ["preserve", "none"])
def test_identical_requests_share_everything_only_in_preserve(traces, tmp_path, mode):
    sessions = [[({"role": "user", "content": "same question"}, "same answer")]] * 2
    source = _trace_from(traces, tmp_path / "in.parquet", "Same system.", sessions, 4)
    _, report, out = _run(tmp_path, source, mode)
    assert report.ok
    first, second = (r["content_messages"] for r in read_trace(out).table.to_pylist())
    assert (first == second) is (mode == "preserve")


def _digit_run(text: str) -> str | None:
    runs = [run for run in re.findall(r"\d+", text) if len(run) >= 6]
    return runs[0] if runs else None


def test_keyed_ids_that_spell_original_digits_are_no_leak_but_kept_ids_are(traces, tmp_path):
    """Hex digits of a re-keyed id can match 5 digits of a card number by chance (the old flaky
    failure); that is no leak. An id-shaped string copied from the original still is one.
    """
    from anonymizer.keys import Rekeyer

    for i in range(5000):  # a seeded search for a key whose request and call ids hold digit runs
        key = hashlib.sha256(f"digits-{i}".encode()).digest()
        rekeyer = Rekeyer(key)
        runs = [
            _digit_run(rekeyer.id("request", "req-0", "req_")),
            _digit_run(rekeyer.id("call", "call_1", "call_")),
        ]
        if all(runs):
            break
    else:
        pytest.fail("no key with digit runs in both ids")
    kept_id = "usr_0123456789abcdef01234567"
    call = {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
    history = [
        {"role": "user", "content": f"Card 7{runs[0]}3, ticket 9{runs[1]}1, account {kept_id}."},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "found"},
    ]
    source = traces.write_content_trace(
        tmp_path / "in.parquet", [traces.make_record(0, history, response="Done.")]
    )
    key_path = tmp_path / "k.key"
    key_path.write_bytes(key)
    key_path.chmod(0o600)
    out = tmp_path / "out.parquet"
    result = anonymize_trace(AnonymizeConfig(source, out, key_file=key_path))
    report = verify_anonymized(source, out, result.tokenizer_id, "preserve")
    row = read_trace(out).table.to_pylist()[0]
    assert runs[0] in row["request_id"] and runs[1] in row["content_messages"]  # the chance matches
    assert report.ok, report.summary_lines()
    table = pq.read_table(out)
    leaked = table.set_column(
        table.schema.get_field_index("content_response"), "content_response", pa.array([f" {kept_id}"])
    )
    pq.write_table(leaked.replace_schema_metadata(table.schema.metadata), out)
    report = verify_anonymized(source, out, result.tokenizer_id, "preserve")
    assert not report.ok and report.leaked_words == 1 and report.leaked_spans > 0


def _json_heavy_trace(traces, path, rows: int = 24):
    """Tool calls whose arguments hold prices and lists of common words, as gateways see them."""
    from llmreplay.exact_text import ExactText
    from llmreplay.tokenizers import load_tokenizer

    words = [w.strip() for w in ExactText(load_tokenizer()).vocabulary[:40]]  # words the generator uses too
    tool = {
        "type": "function",
        "function": {
            "name": "file_refund",
            "parameters": {
                "type": "object",
                "properties": {"amount": {"type": "number"}, "topics": {"type": "array"}},
            },
        },
    }
    records = []
    for i in range(rows):
        arguments = json.dumps(
            {"amount": round(100 + (i * 37.31) % 800, 2), "topics": words[i % 30 : i % 30 + 3]}
        )
        call = {
            "id": f"call_{i}",
            "type": "function",
            "function": {"name": "file_refund", "arguments": arguments},
        }
        history = [{"role": "user", "content": f"Refund order {4000 + i * 7} for {words[i % 40]} please"}]
        records.append(traces.make_record(i, history, tool_calls=[call], tools=[tool]))
    return traces.write_content_trace(path, records)


def test_chance_matches_of_keyed_numbers_and_generator_words_are_no_leak(traces, tmp_path):
    """Random digits next to JSON punctuation (`": 55.`) and generator words inside JSON lists
    (`", "management", "`) used to match original spans by chance: the bundled sample failed
    --verify for more than half of all keys.
    """
    source = _json_heavy_trace(traces, tmp_path / "in.parquet")
    for i in range(6):
        key_path = tmp_path / f"k{i}.key"
        key_path.write_bytes(hashlib.sha256(f"json-heavy-{i}".encode()).digest())
        key_path.chmod(0o600)
        out = tmp_path / f"out{i}.parquet"
        result = anonymize_trace(AnonymizeConfig(source, out, key_file=key_path))
        report = verify_anonymized(source, out, result.tokenizer_id, "preserve")
        assert report.ok and result.miss_count == 0, (i, report.summary_lines(), result.misses)


def test_verification_catches_a_kept_tool_call_number(traces, tmp_path):
    """The leak scan skips JSON numbers, so numbers are proven replaced digit by digit."""
    source = _json_heavy_trace(traces, tmp_path / "in.parquet", rows=2)
    _, report, out = _run(tmp_path, source)
    assert report.ok
    table = pq.read_table(out)
    calls = orjson.loads(table.column("content_tool_calls")[0].as_py())
    original = orjson.loads(pq.read_table(source).column("content_tool_calls")[0].as_py())
    arguments = json.loads(calls[0]["function"]["arguments"])
    amount_key = next(k for k, v in arguments.items() if isinstance(v, float))
    arguments[amount_key] = json.loads(original[0]["function"]["arguments"])["amount"]
    calls[0]["function"]["arguments"] = json.dumps(arguments)
    values = table.column("content_tool_calls").to_pylist()
    values[0] = json.dumps(calls)
    tampered = table.set_column(
        table.schema.get_field_index("content_tool_calls"), "content_tool_calls", pa.array(values)
    )
    pq.write_table(tampered.replace_schema_metadata(table.schema.metadata), out)
    report = verify_anonymized(source, out, "mistral-tekken", "preserve")
    assert not report.ok and report.kept_numbers == 1
