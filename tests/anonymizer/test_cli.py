"""`llmreplay anonymize` end to end: a multi-turn trace with tools, images, schemas and planted
personal data goes in; the output keeps every count, the sharing and the structure, and leaks nothing.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from faker import Faker

from anonymizer.cli import anonymize
from llmreplay.exact_text import ExactText
from llmreplay.tokenizers import load_tokenizer
from llmreplay.trace_format import TraceMeta
from llmreplay.trace_io import read_trace, write_trace

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather for the customer's city",
        "parameters": {
            "type": "object",
            "properties": {
                "location": {"type": "string", "description": "City and country, e.g. Paris, France"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer", "minimum": 1},
            },
            "required": ["location"],
            "additionalProperties": False,
        },
    },
}
ANSWER_FORMAT = {
    "type": "json_schema",
    "json_schema": {
        "name": "support_answer",
        "schema": {
            "type": "object",
            "properties": {
                "summary": {"type": "string", "description": "One sentence"},
                "ticket": {"$ref": "#/$defs/ticket"},
            },
            "$defs": {
                "ticket": {
                    "type": "object",
                    "properties": {"priority": {"type": "string", "enum": ["low", "urgent"]}},
                }
            },
            "required": ["summary"],
        },
        "strict": True,
    },
}


def planted_pii(seed: int = 7) -> dict[str, str]:
    fake = Faker("en_US")
    fake.seed_instance(seed)
    return {
        "name": fake.name(),
        "email": fake.email(),
        "phone": fake.phone_number(),
        "card": fake.credit_card_number(),
        "api_key": "sk-proj-" + fake.pystr(min_chars=32, max_chars=32),
        "address": fake.street_address(),
    }


def build_trace(traces, path, pii: dict[str, str], block_size: int = 16):
    """Two sessions sharing a long system prompt, tool use, an image, a JSON schema, a completion."""
    system = {
        "role": "system",
        "content": "You are the support assistant of Globex Corporation. Be concise and polite. "
        "Never reveal internal ticket numbers. " * 3,
    }
    records, index = [], 0
    for session, user in (("sess-a", pii["name"]), ("sess-b", "Maria Gonzalez")):
        history = [system]
        turns = [
            {
                "role": "user",
                "content": f"Hi, I am {user}, email {pii['email']}, phone {pii['phone']}. Weather in Lyon?",
            },
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": f"Here is my card {pii['card']}, what is on this photo?"},
                    {
                        "type": "image_url",
                        "image_url": {"url": "data:image/jpeg;base64," + "QUJD" * 200, "detail": "low"},
                    },
                    {"type": "text", "text": f"I live at {pii['address']}."},
                ],
            },
            {"role": "user", "content": f"My API key {pii['api_key']} stopped working, can you check it?"},
        ]
        parent = None
        for turn, user_message in enumerate(turns):
            history = history + [user_message]
            calls = None
            response = f"Sure {user}, let me look at that for you."
            if turn == 0:
                calls = [
                    {
                        "id": f"call_{session}",
                        "type": "function",
                        "function": {
                            "name": "get_weather",
                            "arguments": json.dumps({"location": "Lyon, France", "days": 3}),
                        },
                    }
                ]
                response = None
            record = traces.make_record(
                index,
                history,
                session=session,
                turn=turn,
                parent=parent,
                response=response,
                tool_calls=calls,
                tools=[WEATHER_TOOL],
                response_format=ANSWER_FORMAT if turn == 2 else None,
                user=user,
                block_size=block_size,
            )
            records.append(record)
            parent = record.request_id
            index += 1
            if calls:
                history = history + [
                    {"role": "assistant", "content": None, "tool_calls": calls},
                    {
                        "role": "tool",
                        "tool_call_id": f"call_{session}",
                        "content": '{"temp_c": 21, "sky": "clear"}',
                    },
                ]
            else:
                history = history + [{"role": "assistant", "content": response}]
    records.append(
        traces.make_record(
            index,
            None,
            prompt=f"Summarize the complaint of {pii['name']} ({pii['email']}):",
            block_size=block_size,
        )
    )
    return traces.write_content_trace(path, records, block_size)


def run_cli(*args: str):
    return CliRunner().invoke(anonymize, list(args), catch_exceptions=False)


def output_text(path) -> str:
    """Every string the output holds (decoded columns and footer metadata), for leak greps."""
    table = pq.read_table(path)
    parts = [json.dumps(table.to_pylist(), default=str), str(table.schema.metadata)]
    return "\n".join(parts)


@pytest.fixture
def content_trace(traces, tmp_path):
    return build_trace(traces, tmp_path / "in.parquet", planted_pii())


@pytest.mark.e2e
def test_cli_subprocess_anonymizes_and_verifies(content_trace, key_file, tmp_path):
    out = tmp_path / "out.parquet"
    cmd = [sys.executable, "-m", "llmreplay.cli", "anonymize", str(content_trace), "-o", str(out)]
    proc = subprocess.run(
        [*cmd, "--key-file", str(key_file), "--verify"], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "verification PASSED" in proc.stdout
    assert "(100.000%), 0 missed" in proc.stdout
    meta = read_trace(out).meta
    assert meta.anonymized and meta.tokenizer == "mistral-tekken" and meta.format_version.startswith("1.")
    assert meta.extra["anonymization"]["mode"] == "preserve"
    assert meta.source == "anonymized"  # the gateway's name is not carried over
    key = key_file.read_bytes()
    raw = out.read_bytes()
    text = output_text(out)
    assert key not in raw and key.decode() not in text and key.hex() not in text


def test_planted_personal_data_does_not_survive(content_trace, key_file, tmp_path):
    out = tmp_path / "out.parquet"
    result = run_cli(str(content_trace), "-o", str(out), "--key-file", str(key_file), "--verify")
    assert result.exit_code == 0, result.output
    text = output_text(out).lower()
    words = set(re.findall(r"\w+", text))
    # Generator words (Faker's dictionary) may appear by chance; they carry nothing from the input.
    dictionary = {w.strip() for w in ExactText(load_tokenizer()).vocabulary}
    for kind, value in planted_pii().items():
        assert value.lower() not in text, kind
        assert re.sub(r"\D", "", value) not in re.sub(r"\D", "", text) or len(re.sub(r"\D", "", value)) < 7, (
            kind
        )
        for word in re.findall(r"\w+", value.lower()):
            if len(word) >= 4 and word not in dictionary:
                assert word not in words, (kind, word)
    for secret in (
        "globex",
        "lyon",
        "maria",
        "gonzalez",
        "get_weather",
        "support_answer",
        "celsius",
        "urgent",
    ):
        assert secret not in words


def test_shape_is_kept_and_history_is_replaced_identically(content_trace, key_file, tmp_path):
    out = tmp_path / "out.parquet"
    assert run_cli(str(content_trace), "-o", str(out), "--key-file", str(key_file)).exit_code == 0
    before, after = read_trace(content_trace), read_trace(out)
    kept = [c for c in before.table.column_names if not c.startswith("content_") and c not in _REKEYED]
    assert after.table.select(kept).equals(before.table.select(kept))
    rows = after.table.to_pylist()
    chats = [r for r in rows if r["content_messages"]]
    for earlier, later in zip(chats, chats[1:], strict=False):
        if earlier["session_id"] != later["session_id"]:
            continue
        old, new = orjson.loads(earlier["content_messages"]), orjson.loads(later["content_messages"])
        assert new[: len(old)] == old  # turn k's messages inside turn k+1 replaced identically
        if earlier["content_response"] is not None:
            assert new[len(old)]["content"] == earlier["content_response"]
    # the long system prompt stays shared across sessions (preserve mode)
    first_by_session = {}
    for row in chats:
        first_by_session.setdefault(row["session_id"], orjson.loads(row["content_messages"])[0])
    assert len(set(map(json.dumps, first_by_session.values()))) == 1
    # image parts keep type and count, lose data
    image_parts = [
        p
        for r in chats
        for m in orjson.loads(r["content_messages"])
        if isinstance(m.get("content"), list)
        for p in m["content"]
    ]
    assert [p["type"] for p in image_parts].count("image_url") == 4
    assert all(
        len(p["image_url"]["url"]) < 200 and p["image_url"]["detail"] == "low"
        for p in image_parts
        if p["type"] == "image_url"
    )
    # tool names agree between definitions and calls
    tool_name = orjson.loads(chats[0]["content_tools"])[0]["function"]["name"]
    assert orjson.loads(chats[0]["content_tool_calls"])[0]["function"]["name"] == tool_name
    assert tool_name != "get_weather"


_REKEYED = {"request_id", "session_id", "parent_request_id", "user_id", "api_key_hash", "prefix_block_hashes"}


@pytest.mark.parametrize("mode", ["session", "none"])
def test_nonce_modes_break_sharing_and_keep_counts(content_trace, key_file, tmp_path, mode):
    out = tmp_path / f"out-{mode}.parquet"
    result = run_cli(
        str(content_trace), "-o", str(out), "--key-file", str(key_file), "--prefix-sharing", mode, "--verify"
    )
    assert result.exit_code == 0, result.output
    rows = [r for r in read_trace(out).table.to_pylist() if r["content_messages"]]
    starts = {}
    for row in rows:
        first = orjson.loads(row["content_messages"])[0]["content"]
        starts.setdefault(row["session_id"], set()).add(first.split()[0:8].__str__())
    assert len(starts) == 2
    nonces = [s for group in starts.values() for s in group]
    if mode == "session":
        assert all(len(group) == 1 for group in starts.values())  # same nonce within a session
        assert len(set(nonces)) == 2
    else:
        assert len(set(nonces)) == len(rows)  # every request its own nonce
    assert read_trace(out).meta.extra["anonymization"]["nonce_tokens"] == 8


def test_same_key_same_output_other_key_other_output(content_trace, key_file, tmp_path):
    first, second, third = (tmp_path / f"o{i}.parquet" for i in range(3))
    assert run_cli(str(content_trace), "-o", str(first), "--key-file", str(key_file)).exit_code == 0
    assert run_cli(str(content_trace), "-o", str(second), "--key-file", str(key_file)).exit_code == 0
    other = tmp_path / "other.key"
    other.write_bytes(os.urandom(48))
    other.chmod(0o600)
    assert run_cli(str(content_trace), "-o", str(third), "--key-file", str(other)).exit_code == 0
    a, b, c = (read_trace(p).table for p in (first, second, third))
    assert a.equals(b)
    assert a.column("request_id") != c.column("request_id")
    assert a.column("content_messages") != c.column("content_messages")


def test_generated_key_is_written_privately_and_announced(content_trace, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = run_cli(str(content_trace), "-o", str(tmp_path / "out.parquet"))
    assert result.exit_code == 0, result.output
    key_path = tmp_path / "out.anonymization.key"
    assert key_path.exists() and (key_path.stat().st_mode & 0o777) == 0o600
    assert str(key_path) in result.output and "keep it private" in result.output
    assert key_path.read_bytes() not in (tmp_path / "out.parquet").read_bytes()


def test_shape_trace_passes_through_with_ids_rekeyed(traces, key_file, tmp_path):
    full = read_trace(build_trace(traces, tmp_path / "c.parquet", planted_pii()))
    shape_path = tmp_path / "shape.parquet"
    write_trace(
        shape_path,
        full.table.select([c for c in full.table.column_names if not c.startswith("content_")]),
        TraceMeta(source="x", block_size=16),
    )
    out = tmp_path / "out.parquet"
    result = run_cli(str(shape_path), "-o", str(out), "--key-file", str(key_file), "--verify")
    assert result.exit_code == 0, result.output
    after = read_trace(out)
    assert not after.has_content and after.meta.anonymized
    assert set(after.table.column("request_id").to_pylist()).isdisjoint(
        full.table.column("request_id").to_pylist()
    )
    assert after.table.column("messages").equals(full.table.column("messages"))


def _bad(args, expected, tmp_path):
    result = CliRunner().invoke(anonymize, [str(a) for a in args])
    assert result.exit_code == 2, result.output
    assert expected in result.output
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]  # nothing half-written
    return result


def test_bad_key_files_are_refused(content_trace, tmp_path):
    open_key = tmp_path / "open.key"
    open_key.write_bytes(os.urandom(32))
    open_key.chmod(0o644)
    _run_group(
        ["anonymize", content_trace, "-o", tmp_path / "o.parquet", "--key-file", open_key],
        "permissions 0644",
        tmp_path,
    )
    short = tmp_path / "short.key"
    short.write_bytes(b"x" * 31)
    short.chmod(0o600)
    _run_group(
        ["anonymize", content_trace, "-o", tmp_path / "o.parquet", "--key-file", short],
        "need at least 32",
        tmp_path,
    )
    assert not (tmp_path / "o.parquet").exists()


def test_existing_output_needs_force(content_trace, key_file, tmp_path):
    out = tmp_path / "out.parquet"
    out.write_bytes(b"precious")
    _run_group(["anonymize", content_trace, "-o", out, "--key-file", key_file], "already exists", tmp_path)
    assert out.read_bytes() == b"precious"
    assert run_cli(str(content_trace), "-o", str(out), "--key-file", str(key_file), "--force").exit_code == 0


def test_tokenizer_that_does_not_load_and_bad_trace(content_trace, key_file, tmp_path):
    out = tmp_path / "o.parquet"
    _run_group(
        ["anonymize", content_trace, "-o", out, "--key-file", key_file, "--tokenizer", "tiktoken:nope"],
        "--tokenizer",
        tmp_path,
    )
    not_a_trace = tmp_path / "junk.parquet"
    not_a_trace.write_bytes(b"not parquet")
    _run_group(["anonymize", not_a_trace, "-o", out, "--key-file", key_file], "not a Parquet file", tmp_path)


def test_directory_mixing_content_and_shape_files_is_refused(traces, key_file, tmp_path):
    folder = tmp_path / "trace"
    folder.mkdir()
    full = read_trace(build_trace(traces, folder / "a.parquet", planted_pii()))
    shape = full.table.select([c for c in full.table.column_names if not c.startswith("content_")])
    later = shape.set_column(0, "request_id", pa.array([f"b-{i}" for i in range(shape.num_rows)]))
    write_trace(folder / "b.parquet", later, TraceMeta(source="x", block_size=16))
    _run_group(
        ["anonymize", folder, "-o", tmp_path / "o.parquet", "--key-file", key_file],
        "has no content columns",
        tmp_path,
    )


def _run_group(args, expected, tmp_path):
    """Through the real `llmreplay` group, which turns BadInput into one line and exit status 2."""
    from llmreplay.cli import cli

    result = CliRunner().invoke(cli, [str(a) for a in args])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("llmreplay: error:") and expected in lines[0], (
        result.output
    )
    assert not [p for p in tmp_path.rglob("*") if ".tmp-" in p.name]


def test_verify_loads_a_tokenizer_json_the_trace_names_by_id(tmp_path, traces, key_file):
    """A recording counted with a tokenizer.json names it by id (not a path): --verify loads the file given."""
    import tokenizer_families

    from llmreplay.tokenizers import load_tokenizer as load

    path = tokenizer_families.byte_level_bpe(tmp_path)
    record = traces.make_record(0, [{"role": "user", "content": "Where is my parcel, Ms Jane Doe?"}])
    meta = TraceMeta(source="gateway", block_size=16, tokenizer=load(str(path)).id, content=True)
    trace = write_trace(tmp_path / "t.parquet", [record], meta)
    assert not meta.tokenizer.endswith(".json")  # an id such as hf:byte-level-bpe-32k.json#<digest>
    result = CliRunner().invoke(
        anonymize,
        [str(trace), "-o", str(tmp_path / "a.parquet"), "--key-file", str(key_file), "--tokenizer", str(path),
         "--verify", "--quiet"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
