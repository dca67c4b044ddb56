"""The `usage` object of every dialect (chat/completions, Responses, Anthropic Messages), read one way.

`prompt_tokens` is what the engine processed (Anthropic's `input_tokens` excludes its cache reads and
writes, so they are added back); `completion_tokens` counts reasoning and answer tokens together.
"""

from __future__ import annotations

from dataclasses import dataclass

# Anthropic's usage keys for the prompt tokens its `input_tokens` leaves out.
CACHE_READ_KEY, CACHE_WRITE_KEY = "cache_read_input_tokens", "cache_creation_input_tokens"


@dataclass(frozen=True, slots=True)
class Usage:
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None  # prompt_tokens_details / input_tokens_details; cache_read_input_tokens
    reasoning_tokens: int | None = None  # completion_tokens_details / output_tokens_details
    cache_write_tokens: int | None = None  # cache_creation_input_tokens (Anthropic)


def parse_usage(usage) -> Usage:
    """The counts a server reported; a count that is not a non-negative integer is None."""
    if not isinstance(usage, dict):
        return Usage()
    if CACHE_READ_KEY in usage or CACHE_WRITE_KEY in usage:
        return _anthropic_usage(usage)
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


def _anthropic_usage(usage: dict) -> Usage:
    """input_tokens + cache reads + cache writes are the prompt the engine processed."""
    fresh, read, written = (
        _count(usage.get(key)) for key in ("input_tokens", CACHE_READ_KEY, CACHE_WRITE_KEY)
    )
    prompt = None if fresh is None else fresh + (read or 0) + (written or 0)
    return Usage(prompt, _count(usage.get("output_tokens")), read, None, written)


def merge_usage(earlier: dict | None, later) -> dict | None:
    """A stream's usage so far updated by a later report (Anthropic splits it over message_start and
    message_delta, each key a running total): the later value of each key wins."""
    if not isinstance(later, dict):
        return earlier
    return {**earlier, **later} if earlier else later


def _detail(details, key: str):
    return details.get(key) if isinstance(details, dict) else None


def _count(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None
