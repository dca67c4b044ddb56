"""The recorder's settings, defined once: the CLI and the mitmproxy options both build a RecorderConfig.

Parsing of human sizes lives here too (durations: llmreplay.durations); nothing here imports mitmproxy.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from pathlib import Path

from llmreplay import durations
from llmreplay.errors import BadInput
from llmreplay.tokenizers import DEFAULT_TOKENIZER
from llmreplay.trace_format import DEFAULT_BLOCK_SIZE

DEFAULT_PATHS = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses")
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

    out: str = ""
    content: bool = False
    tokenizer: str = DEFAULT_TOKENIZER
    key_file: str = DEFAULT_KEY_FILE
    block_size: int = DEFAULT_BLOCK_SIZE
    paths: tuple[str, ...] = DEFAULT_PATHS
    session_header: str = ""
    session_from_user: bool = False
    max_sessions: int = 100_000
    rotate: str = "1h"
    spool_limit: str = "4GB"  # journal bytes kept on disk while the converter lags or is down
    flush_interval_s: float = 0.5
    stats_interval_s: float = 60.0
    max_capture_bytes: int = 16 * 1024 * 1024
    reorder_window_s: float = 120.0
    stream_unrecorded: bool = True

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
        if self.max_sessions <= 0:
            raise BadInput(f"--max-sessions {self.max_sessions}: must be positive")
        if not 0 < self.flush_interval_s <= 1.0:
            raise BadInput(f"flush interval {self.flush_interval_s}s: must be in (0, 1] seconds")
        if not self.paths or any(not p.startswith("/") for p in self.paths):
            raise BadInput(f"--path {list(self.paths)}: each path pattern must start with '/'")
        parse_rotate(self.rotate)
        parse_size_bytes(self.spool_limit, "--spool-limit")
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


def parse_duration_s(text: str, what: str = "--duration") -> float:
    """'90s', '15m', '24h', '2d', '250ms' or a plain number of seconds (llmreplay.durations)."""
    return durations.parse_duration_s(text, what)


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
            seconds = parse_duration_s(part, "--rotate")
    if seconds is None and size is None:
        raise BadInput(f"--rotate {text!r}: give a time (1h) or a size (256MB)")
    return seconds, size


def check_tokenizer_spec(spec: str) -> None:
    """Refuse an obviously wrong --tokenizer without loading it: the proxy never loads a tokenizer
    (the converter process does, and reports a failure at start)."""
    if spec == DEFAULT_TOKENIZER or (spec.startswith("tiktoken:") and len(spec) > len("tiktoken:")):
        return
    path = Path(spec.removeprefix("hf:")).expanduser()
    if path.suffix == ".json" or spec.startswith("hf:"):
        if not path.is_file():
            raise BadInput(f"--tokenizer {spec}: no such file")
        return
    raise BadInput(
        f"--tokenizer {spec}: unknown tokenizer (use '{DEFAULT_TOKENIZER}', 'tiktoken:<encoding>' "
        "or a path to a Hugging Face tokenizer.json)"
    )
