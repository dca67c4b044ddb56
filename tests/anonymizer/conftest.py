"""Fixtures for anonymizer tests: content traces built the way the recorder builds them, key files."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from llmreplay.prefix_hash import prefix_block_hashes
from llmreplay.tokenizers import load_tokenizer
from llmreplay.trace_format import MessageShape, TraceMeta, TraceRecord
from llmreplay.trace_io import write_trace

BASE_US = 1_700_000_000_000_000


def message_text(message) -> tuple[str, str]:
    """The recorder's per-message text (recorder/request_shape.py), restated so tests stand alone."""
    if message.get("type") == "function_call":
        return "assistant", f"{message.get('name') or ''}{message.get('arguments') or ''}"
    content = message.get("content")
    if isinstance(content, list):
        content = "\n".join(
            p if isinstance(p, str) else p["text"] for p in content if isinstance(p, str) or "text" in p
        )
    parts = [content if isinstance(content, str) else ""]
    for call in message.get("tool_calls") or ():
        parts.append(f"{call['function'].get('name') or ''}{call['function'].get('arguments') or ''}")
    return message.get("role", "unknown"), "".join(parts)


def make_record(
    index: int,
    messages: list | None,
    *,
    session: str | None = None,
    turn: int = 0,
    parent: str | None = None,
    response: str | None = None,
    tool_calls: list | None = None,
    tools: list | None = None,
    response_format: dict | None = None,
    prompt=None,
    user: str | None = None,
    block_size: int = 16,
) -> TraceRecord:
    """One request row as the recorder would write it (counts and hashes under mistral-tekken)."""
    tokenizer = load_tokenizer()
    shapes, ids = [], []
    for message in messages or ():
        role, text = message_text(message)
        message_ids = tokenizer.encode(text) if text else []
        shapes.append(MessageShape(role, len(message_ids)))
        ids.extend(message_ids)
    if prompt is not None:
        ids = tokenizer.encode(prompt if isinstance(prompt, str) else "\n".join(prompt))
    schema = (response_format or {}).get("json_schema", {}).get("schema")
    return TraceRecord(
        request_id=f"req-{index}",
        arrival_time=BASE_US + index * 1000,
        endpoint="chat_completions" if prompt is None else "completions",
        prompt_tokens=len(ids),
        token_source="tokenizer",
        session_id=session,
        turn_index=turn,
        parent_request_id=parent,
        user_id=user,
        api_key_hash=None if user is None else f"keyhash-{user}",
        completion_tokens=tokenizer.count(response or ""),
        tools_count=len(tools or ()),
        tool_definition_tokens=tokenizer.count(_json(tools)) if tools else 0,
        tool_calls_count=len(tool_calls or ()),
        structured_output="json_schema" if schema else "none",
        schema_tokens=tokenizer.count(_json(schema)) if schema else 0,
        messages=tuple(shapes),
        prefix_block_hashes=tuple(prefix_block_hashes(ids, block_size)),
        content_messages=None if messages is None else _json(messages),
        content_prompt=None if prompt is None else _json(prompt),
        content_tools=_json(tools) if tools else None,
        content_response_format=_json(response_format) if response_format else None,
        content_response=response,
        content_tool_calls=_json(tool_calls) if tool_calls else None,
    )


def _json(value) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def write_content_trace(path: Path, records: list[TraceRecord], block_size: int = 16) -> Path:
    meta = TraceMeta(
        source="test-gateway.internal", block_size=block_size, tokenizer="mistral-tekken", content=True
    )
    return write_trace(path, records, meta)


@pytest.fixture
def key_file(tmp_path) -> Path:
    path = tmp_path / "secret.key"
    path.write_bytes(os.urandom(32).hex().encode())
    path.chmod(0o600)
    return path


class TraceBuilder:
    """What tests use to build traces (fixtures, because test modules cannot import conftest)."""

    make_record = staticmethod(make_record)
    write_content_trace = staticmethod(write_content_trace)
    message_text = staticmethod(message_text)


@pytest.fixture(scope="session")
def traces() -> TraceBuilder:
    return TraceBuilder()
