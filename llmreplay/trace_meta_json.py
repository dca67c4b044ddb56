"""A trace file's metadata JSON, checked field by field before it becomes a TraceMeta.

Raises ValueError naming the first bad field; readers turn it into one line naming the file.
"""

from __future__ import annotations

import json

from llmreplay.trace_format import TraceMeta

MAX_BLOCK_SIZE = 1 << 20  # tokens per prefix block: far above any engine's (16 to 512 in practice)
_TEXT = ("source", "time_zone", "clock_domain", "format_version", "creator", "creator_version")
_FLAGS = ("content", "anonymized", "relative_time")


def parse_meta(raw: bytes) -> TraceMeta:
    """TraceMeta from the JSON under the llmreplay metadata key; unknown keys are ignored."""
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{_kind(data)}, expected an object")
    for name in _TEXT:
        if name in data and not isinstance(data[name], str):
            raise ValueError(f"'{name}' is {_kind(data[name])}, expected a string")
    if "source" not in data:
        raise ValueError("'source' is missing")
    for name in _FLAGS:
        if name in data and not isinstance(data[name], bool):
            raise ValueError(f"'{name}' is {_kind(data[name])}, expected true or false")
    if "tokenizer" in data and data["tokenizer"] is not None and not isinstance(data["tokenizer"], str):
        raise ValueError(f"'tokenizer' is {_kind(data['tokenizer'])}, expected a string or null")
    if "extra" in data and not isinstance(data["extra"], dict):
        raise ValueError(f"'extra' is {_kind(data['extra'])}, expected an object")
    block = data.get("block_size", 1)
    if isinstance(block, bool) or not isinstance(block, int):
        raise ValueError(f"'block_size' is {_kind(block)}, expected a whole number of tokens")
    if not 0 < block <= MAX_BLOCK_SIZE:
        raise ValueError(f"'block_size' {block}: must be between 1 and {MAX_BLOCK_SIZE} tokens")
    return TraceMeta.from_json(raw)


_JSON_TYPES = {
    dict: "an object",
    list: "an array",
    str: "a string",
    bool: "a boolean",
    int: "a number",
    float: "a number",
}


def _kind(value) -> str:
    if value is None:
        return "null"
    return f"{_JSON_TYPES.get(type(value), type(value).__name__)} ({json.dumps(value)[:40]})"
