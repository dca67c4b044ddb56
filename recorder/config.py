"""The recorder's settings, each declared once on its field: `record`'s flags and the addon's mitmproxy
options are built from them. Parsing of human sizes lives here too; no mitmproxy, no pyarrow here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from pathlib import Path

from llmreplay import durations
from llmreplay.errors import BadInput
from llmreplay.options import duration_s, option
from llmreplay.tokenizers import DEFAULT_TOKENIZER, parse_tokenizer_spec
from llmreplay.trace_format import RECORDED_BLOCK_SIZE
from recorder.decoding import MAX_DECODED_BYTES

DEFAULT_PATHS = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses", "/v1/messages")
DEFAULT_KEY_FILE = "~/.config/llmreplay/recorder.key"

_SIZE_UNITS_BYTES = {
    "b": 1,
    "kb": 1000,
    "mb": 1000**2,
    "gb": 1000**3,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
}


@dataclass(frozen=True, slots=True)
class RecorderConfig:
    """Everything the addon needs; field names are the `llmreplay_<name>` mitmproxy options."""

    out: str = option(
        "",
        flags=("-o", "--out"),
        required=True,
        metavar="DIR",
        help="Directory for the trace files (as a mitmproxy option: recording is off when empty).",
    )
    content: bool = option(
        False,
        flags=("--content/--shape",),
        type=bool,
        help="Also record message, tool and response content (for anonymization), or shape only.",
    )
    tokenizer: str = option(
        DEFAULT_TOKENIZER,
        help="Tokenizer for message counts and prefix hashes (and prompt counts when the server sends no "
        "usage): production model's tokenizer.json makes shared prefixes replay exactly in its tokens.",
    )
    key_file: str = option(
        DEFAULT_KEY_FILE,
        help="Secret key file for keyed hashes (created 0600 if absent; outside the trace, never in it).",
    )
    block_size: int = option(
        RECORDED_BLOCK_SIZE,
        type=int,
        help="Tokens per prefix-hash block: the replay reproduces shared prefixes to within one block "
        "(16: vLLM's cache block; a divisor of 512 keeps Mooncake export exact).",
    )
    paths: tuple[str, ...] = option(
        DEFAULT_PATHS,
        flags=("--path",),
        multiple=True,
        help="URL path to record (exact or glob; repeat); other paths pass through unrecorded.",
    )
    session_header: str = option("", help="Request header that names the session (conversation).")
    session_from_user: bool = option(
        False, flag_value=True, help="Use the request's `user` field as the session when no header names one."
    )
    max_sessions: int = option(
        100_000, type=int, help="Conversations remembered for session inference (LRU)."
    )
    rotate: str = option("1h", help="New Parquet file after a time and/or size: 1h, 256MB, '1h,256MB'.")
    spool_limit: str = option(
        "4GB",
        help="Disk kept for unconverted captures while filing lags or is down; beyond it new captures are "
        "dropped and counted, traffic still flows.",
    )
    flush_interval_s: float = option(
        0.5, cli=False, help="Seconds between spool fsyncs and watermark ticks (at most 1)."
    )
    stats_interval_s: float = option(
        60.0, flags=("--stats-interval",), help="Log counters and loop lag this often.", **duration_s()
    )
    max_request_bytes: int = option(
        MAX_DECODED_BYTES,
        type=int,
        help="Request body bytes parsed per request, as decoded (a compressed body is decoded in the converter, "
        "bounded by this and a ratio cap); a bigger one is forwarded untouched and filed with invalid_fields "
        "'request_body_over_limit'.",
    )
    max_capture_bytes: int = option(
        16 * 1024 * 1024,
        cli=False,
        help="Response bytes kept per request for parsing (the client always gets all).",
    )
    reorder_window_s: float = option(
        120.0, cli=False, help="Longest a finished row waits for older live requests before it is filed."
    )
    stream_unrecorded: bool = option(
        True, cli=False, help="Stream (not buffer) responses of paths that are not recorded."
    )

    def validated(self) -> RecorderConfig:
        """Raise BadInput naming the first bad setting; return self so calls chain."""
        if not self.out:
            raise BadInput("llmreplay_out: no output directory given")
        out = Path(self.out).expanduser().resolve()
        key = Path(self.key_file).expanduser().resolve()
        if out == key.parent or out in key.parents:
            raise BadInput(f"--key-file {self.key_file}: must live outside the output directory {self.out}")
        if self.block_size <= 0:
            raise BadInput(f"--block-size {self.block_size}: must be a positive number of tokens")
        if self.max_request_bytes <= 0:
            raise BadInput(f"--max-request-bytes {self.max_request_bytes}: must be positive")
        if self.max_sessions <= 0:
            raise BadInput(f"--max-sessions {self.max_sessions}: must be positive")
        if not 0 < self.flush_interval_s <= 1.0:
            raise BadInput(f"flush interval {self.flush_interval_s}s: must be in (0, 1] seconds")
        if not self.paths or any(not p.startswith("/") for p in self.paths):
            raise BadInput(f"--path {list(self.paths)}: each path pattern must start with '/'")
        parse_rotate(self.rotate)
        parse_size_bytes(self.spool_limit, "--spool-limit")
        parse_tokenizer_spec(self.tokenizer)  # its form only: the converter loads it, never the proxy
        return self

    @property
    def rotate_seconds(self) -> float | None:
        return parse_rotate(self.rotate)[0]

    @property
    def rotate_bytes(self) -> int | None:
        return parse_rotate(self.rotate)[1]

    @property
    def spool_limit_bytes(self) -> int:
        return parse_size_bytes(self.spool_limit, "--spool-limit")


def option_names() -> list[str]:
    return [f.name for f in fields(RecorderConfig)]


def parse_size_bytes(text: str, what: str = "--rotate") -> int:
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmg]i?b|b)\s*", text.lower())
    if not match:
        raise BadInput(f"{what} {text!r}: not a size (use e.g. 256MB, 1GiB)")
    value = int(float(match.group(1)) * _SIZE_UNITS_BYTES[match.group(2)])
    if value <= 0:
        raise BadInput(f"{what} {text!r}: must be positive")
    return value


def parse_rotate(text: str) -> tuple[float | None, int | None]:
    """`--rotate 1h`, `--rotate 256MB` or both, comma-separated: (seconds, bytes)."""
    seconds, size = None, None
    for part in (p for p in text.split(",") if p.strip()):
        if re.search(r"b\s*$", part.lower()):
            size = parse_size_bytes(part)
        else:
            seconds = durations.parse_duration_s(part, "--rotate")
    if seconds is None and size is None:
        raise BadInput(f"--rotate {text!r}: give a time (1h) or a size (256MB)")
    return seconds, size
