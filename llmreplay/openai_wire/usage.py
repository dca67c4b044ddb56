"""The `usage` object of chat/completions and of the Responses API, read the same way everywhere.

`completion_tokens` counts reasoning and answer tokens together; `reasoning_tokens` is its share.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Usage:
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None  # prompt_tokens_details.cached_tokens
    reasoning_tokens: int | None = None  # completion_tokens_details.reasoning_tokens


def parse_usage(usage) -> Usage:
    """The counts a server reported; a count that is not a non-negative integer is None."""
    if not isinstance(usage, dict):
        return Usage()
    prompt = usage.get("prompt_tokens", usage.get("input_tokens"))
    completion = usage.get("completion_tokens", usage.get("output_tokens"))
    prompt_details = usage.get("prompt_tokens_details") or usage.get("input_tokens_details")
    output_details = usage.get("completion_tokens_details") or usage.get("output_tokens_details")
    return Usage(
        _count(prompt),
        _count(completion),
        _count(_detail(prompt_details, "cached_tokens")),
        _count(_detail(output_details, "reasoning_tokens")),
    )


def _detail(details, key: str):
    return details.get(key) if isinstance(details, dict) else None


def _count(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None
