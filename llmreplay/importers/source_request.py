"""What every source reader hands over: plain requests plus the rows it skipped, and why.

Readers parse; `assemble.py` turns these into trace records. Nothing here does I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from llmreplay.trace_format import MessageShape

SKIP_FAILED = "failed (0 in / 0 out)"
SKIP_FAILED_NO_OUTPUT = "failed (0 response tokens)"
SKIP_NO_TIMESTAMP = "no timestamp"
SKIP_NO_ANCHOR = "later turn whose session has no timestamped earlier turn"
_SHOWN_LINES = 5

# Metadata `extra[HASH_ID_ORIGIN_KEY] == SOURCE_IDS` marks prefix hashes that are the source's own small
# ids (Mooncake hash_ids): the Mooncake exporter then writes them back unchanged instead of remapping.
HASH_ID_ORIGIN_KEY = "hash_ids"
SOURCE_IDS = "source_ids"


@dataclass(frozen=True, slots=True)
class SourceRequest:
    """One request as the source describes it.

    `arrival_us` is None only for AIPerf-style later turns that give a `delay_ns` (wait after the
    previous turn's answer) instead of a timestamp; assembly resolves them within their session.
    """

    line: int  # 1-based line in the source file; names the row in request ids and messages
    arrival_us: int | None
    prompt_tokens: int
    completion_tokens: int | None
    prefix_block_hashes: tuple[int, ...] = ()
    session_id: str | None = None
    delay_ns: int | None = None
    e2e_ns: int | None = None
    model: str | None = None
    messages: tuple[MessageShape, ...] | None = None  # None: one user message of prompt_tokens
    # what only some sources know (None: the source does not say; assembly assumes or leaves it null)
    request_id: str | None = None  # None: "<source>-<line>"
    endpoint: str | None = None
    stream: bool | None = None
    max_tokens: int | None = None
    ttft_ns: int | None = None
    cached_tokens: int | None = None
    cache_write_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class SourceRead:
    """A whole source file, parsed. `extra` lands in the trace metadata (counts, assumptions)."""

    requests: list[SourceRequest]
    skipped: dict[str, list[int]]
    block_size: int
    relative_time: bool
    has_prefix_hashes: bool
    extra: dict[str, Any] = field(default_factory=dict)


def skip(skipped: dict[str, list], reason: str, line: int | str) -> None:
    """`line`: the row's line number, or a "file:line" where rows share lines or files."""
    skipped.setdefault(reason, []).append(line)


def skip_summary(skipped: dict[str, list], total_rows: int, unit: str = "rows") -> str | None:
    """One line for stderr: how many rows (spans, ...) were skipped, why, and the first few line numbers."""
    count = sum(len(lines) for lines in skipped.values())
    if not count:
        return None
    parts = []
    for reason, lines in skipped.items():
        shown = ", ".join(str(n) for n in lines[:_SHOWN_LINES]) + (
            ", ..." if len(lines) > _SHOWN_LINES else ""
        )
        parts.append(f"{len(lines)} {reason} (lines {shown})")
    return f"skipped {count} of {total_rows} {unit}: " + "; ".join(parts)


def skip_counts(skipped: dict[str, list[int]]) -> dict[str, dict[str, Any]]:
    """The skips as metadata: count and the first few lines per reason."""
    return {
        reason: {"count": len(lines), "first_lines": lines[:_SHOWN_LINES]}
        for reason, lines in skipped.items()
    }
