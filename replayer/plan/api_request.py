"""The prompt, system, tools, tool_choice and format fields of a Responses or Messages request, from
recorded content (each API's own arrays) or spelled from the shape; an expanded turn carries its
ancestors' input and output. Pure: the caller adds model, stream, length and sampling fields.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import orjson

from llmreplay.errors import BadInput
from llmreplay.trace_format import TraceRecord
from llmreplay.wire.api_body import ApiBody
from llmreplay.wire.chat_api import chat_view
from replayer.plan.prompt_synthesis import BlockSpeller

TOOL_FRAME_TOKENS = 20  # ~tokens of JSON around a synthesized tool's description
TOOL_PARAMETERS = {"type": "object", "properties": {"input": {"type": "string"}}}


def load_column(record: TraceRecord, column: str, text: str, kind) -> object:
    """A content column's JSON value, checked to be of `kind`; BadInput naming the row and column."""
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        raise BadInput(f"request {record.request_id}: column '{column}' is not valid JSON") from None
    if not isinstance(value, kind):
        raise BadInput(f"request {record.request_id}: column '{column}' has the wrong JSON type")
    return value


def tagged(prompt: object, tag: str) -> object:
    """Recorded prompt with a per-copy tag in front of its first text (so copies share no prefix)."""
    if not tag:
        return prompt
    if isinstance(prompt, str):
        return tag + prompt
    if prompt and isinstance(prompt[0], dict) and isinstance(prompt[0].get("content"), str):
        return [{**prompt[0], "content": tag + prompt[0]["content"]}, *prompt[1:]]
    return prompt


def _loads(record: TraceRecord, column: str, kind) -> object:
    return load_column(record, column, getattr(record, column), kind)


def content_fields(row: ApiBody, record: TraceRecord, tag: str, history: Sequence[TraceRecord]) -> dict:
    """The recorded content as the API's fields; `history`: ancestors sent expanded, root first."""
    prompt = _loads(record, "content_messages", (str, list))
    if history:
        items = []
        for turn in history:
            items += _as_items(_loads(turn, "content_messages", (str, list)))
            items += _output_items(row, turn)
        prompt = items + _as_items(prompt)
    prompt = tagged(prompt, tag)  # in front of the whole history: a copy shares no prefix with its original
    fields = {row.prompt_field: prompt}
    if record.content_system is not None:
        fields[row.system_field] = _loads(record, "content_system", (str, list))
    tools = _loads(record, "content_tools", list) if record.content_tools is not None else None
    fields.update(tool_fields(row, record.tool_choice, tools or None))
    if record.content_response_format is not None:
        fields.update(row.format_fields(_loads(record, "content_response_format", dict)))
    return fields


def _as_items(prompt: object) -> list:
    """A Responses `input` as a list of items (a string input is one user message)."""
    return [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)


def _output_items(row: ApiBody, turn: TraceRecord) -> list:
    """What a recorded turn answered, as input items of the next turn: its text, then its tool calls."""
    items: list = []
    if turn.content_response:
        items.append({"role": "assistant", "content": turn.content_response})
    calls = _loads(turn, "content_tool_calls", list) if turn.content_tool_calls is not None else ()
    for call in calls:
        function = call.get("function") or {} if isinstance(call, dict) else {}
        items.append(
            {
                "type": "function_call",
                "call_id": call.get("id") or f"call_{len(items)}",
                "name": function.get("name", ""),
                "arguments": function.get("arguments", ""),
            }
        )
    return items


def tool_fields(row: ApiBody, recorded_choice: str | None, tools: list | None) -> dict:
    if not tools:
        return {}
    fields: dict = {"tools": tools}
    if recorded_choice is not None:
        first = row.tool_name(tools[0]) if isinstance(tools[0], dict) else None
        fields["tool_choice"] = row.tool_choice(recorded_choice, first or "")
    return fields


def spelled_turns(
    speller: BlockSpeller,
    record: TraceRecord,
    nonce: int,
    correction: int,
    history: Sequence[TraceRecord],
    sent_correction: Callable[[TraceRecord], int] = lambda turn: 0,
) -> list[tuple[str, str]]:
    """(role, text) of a shape row: its own messages, after its ancestors' turns (their input as they
    were sent, respelled with `sent_correction(turn)`, without system prompts, which a chained turn does
    not inherit, and an answer of their output length)."""
    own = speller.messages(
        record.messages,
        record.prompt_tokens,
        record.prefix_block_hashes,
        record.request_id,
        nonce,
        correction,
    )
    if not history:
        return own
    earlier: list[tuple[str, str]] = []
    for turn in history:
        spelled = speller.messages(
            turn.messages, turn.prompt_tokens, turn.prefix_block_hashes, turn.request_id, nonce,
            sent_correction(turn),
        )  # fmt: skip
        earlier += [(role, text) for role, text in spelled if role != "system"]
        if turn.completion_tokens:
            earlier.append(
                ("assistant", speller.text(turn.completion_tokens, f"{turn.request_id}/output", nonce))
            )
    system = [pair for pair in own[:1] if pair[0] == "system"]
    return system + earlier + own[len(system) :]


def synthesized_tools(row: ApiBody, speller: BlockSpeller, record: TraceRecord, nonce: int) -> list[tuple]:
    """(name, description, parameters) of each synthesized tool, sized from the shape."""
    if record.tools_count <= 0:
        return []
    per_tool = max(1, record.tool_definition_tokens // record.tools_count - TOOL_FRAME_TOKENS)
    return [
        (f"tool_{i}", speller.text(per_tool, f"{record.request_id}/tool{i}", nonce), TOOL_PARAMETERS)
        for i in range(record.tools_count)
    ]


def shape_fields(
    row: ApiBody,
    speller: BlockSpeller,
    record: TraceRecord,
    nonce: int,
    spelled: Sequence[tuple[str, str]],
    tools: Sequence[tuple],
) -> dict:
    """The API's fields for spelled text, synthesized tools and the shape's format."""
    fields = row.spell(spelled)
    fields.update(tool_fields(row, record.tool_choice, [row.tool(*tool) for tool in tools]))
    description = ""
    if record.structured_output == "json_schema" and record.schema_tokens > 0:
        description = speller.text(record.schema_tokens, f"{record.request_id}/schema", nonce)
    fmt = row.formats(record.structured_output, description)
    if fmt is not None:
        fields.update(row.format_fields(fmt))
    return fields


def chat_tools(tools: Sequence[tuple]) -> list[dict] | None:
    """Synthesized tools as chat tool definitions: what the engine templates them as, for counting."""
    return [
        {"type": "function", "function": {"name": n, "description": d, "parameters": p}} for n, d, p in tools
    ] or None


def counted_view(endpoint: str, fields: dict) -> tuple[list[dict], list[dict] | None]:
    """Recorded content as chat messages and tools (the dialect's reading: text-bearing blocks as
    text), for counting on the target; approximate where a block is templated otherwise."""
    from llmreplay.wire.dialects import dialect_for

    dialect = dialect_for(endpoint)
    spelled = [(m.role, m.text) for m in dialect.request_messages(fields)]
    tools = [
        (t["name"] or "", t["description"] or "", t["parameters"] or {})
        for t in dialect.request_tools(fields)
    ]
    return chat_view(spelled), chat_tools(tools)
