"""What the proxy hands to its converter process: plain data, light to import (the proxy never loads pyarrow)."""

from __future__ import annotations

from dataclasses import dataclass, field

from recorder.decoding import MAX_DECODED_BYTES


@dataclass(frozen=True, slots=True)
class ConverterSpec:
    """What the proxy hands to its converter; plain data, pickled through the spawn pipe."""

    out_dir: str
    run_token: str
    parent_pid: int
    tokenizer: str
    key: bytes = field(repr=False)  # travels by pipe only, never through a file or a log line
    block_size: int
    content: bool
    session_from_user: bool
    max_sessions: int
    flush_interval_s: float
    rotate_s: float | None
    rotate_bytes: int | None
    stats_interval_s: float
    max_request_bytes: int = MAX_DECODED_BYTES
    spool_limit_bytes: int | None = None  # journal and dead letters together (--spool-limit)
