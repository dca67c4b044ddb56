"""Every parameter of the simulated engine, with its one default; profiles (TOML) override them.

Precedence: dataclass defaults < profile file < explicit CLI flags.
"""

from __future__ import annotations

import dataclasses
import tomllib
from dataclasses import dataclass
from pathlib import Path

from llmreplay.errors import BadInput
from llmreplay.openai_wire.channels import REASONING, text_keys
from llmreplay.tokenizers import DEFAULT_TOKENIZER
from llmreplay.trace_format import DEFAULT_BLOCK_SIZE

PROFILES_DIR = Path(__file__).parent / "profiles"
OUTPUT_LEN_DISTS = ("fixed", "uniform", "lognormal")
EVENT_LOOPS = ("uvloop", "asyncio")
ERROR_STATUSES = (500, 503)
REASONING_FIELDS = text_keys(REASONING)


@dataclass(frozen=True, slots=True)
class SimConfig:
    """All knobs of `llmreplay sim`. Times: `*_ns` integers, `*_ms` floats (milliseconds)."""

    host: str = "127.0.0.1"
    port: int = 8000
    models: tuple[str, ...] = ("sim-model",)
    seed: int = 0
    log_path: str | None = None  # ground truth Parquet; steps go next to it as <stem>.steps.parquet
    event_loop: str = "uvloop"  # or "asyncio"
    tokenizer: str = DEFAULT_TOKENIZER
    message_overhead_tokens: int = 0  # added per chat message, like a chat template would
    # engine: continuous batching with an affine step-time model
    max_num_seqs: int = 64
    kv_cache_tokens: int = 1_048_576
    max_prefill_tokens_per_step: int = 16_384  # chunked-prefill budget; one request is always admitted
    prefill_ns_per_token: int = 20_000
    decode_base_ms: float = 5.0
    decode_per_seq_ms: float = 0.05
    prefix_cache_blocks: int = 4096
    block_size: int = DEFAULT_BLOCK_SIZE
    max_waiting: int = 1024  # queue limit: beyond it, 429 with Retry-After
    retry_after_s: int = 1
    # output length when max_tokens does not force it
    output_len_dist: str = "lognormal"
    output_len_median_tokens: int = 128
    output_len_sigma: float = 0.7  # lognormal shape
    output_len_min_tokens: int = 1
    output_len_max_tokens: int = 2048
    # reasoning streamed before each chat answer, off by default; header X-Sim-Reasoning-Tokens sets one request's
    reasoning_tokens: int = 0  # median
    reasoning_tokens_sigma: float = 0.0  # lognormal shape; 0: exactly reasoning_tokens
    reasoning_field: str = "reasoning"  # or reasoning_content
    # failure injection, all off by default
    error_rate: float = 0.0
    error_status: int = 500
    cut_rate: float = 0.0
    stream_error_rate: float = 0.0
    spike_rate: float = 0.0  # share of engine steps that take spike_ms longer
    spike_ms: float = 0.0
    slow_first_token_ms: float = 0.0
    slow_first_token_rate: float = 1.0  # share of requests delayed when slow_first_token_ms > 0

    @property
    def decode_base_ns(self) -> int:
        return round(self.decode_base_ms * 1e6)

    @property
    def decode_per_seq_ns(self) -> int:
        return round(self.decode_per_seq_ms * 1e6)


FIELD_TYPES = {f.name: f.type for f in dataclasses.fields(SimConfig)}
# Settings that describe one run, not an engine: flags only, never a profile.
_RUN_ONLY = ("host", "port", "log_path", "event_loop")


def profile_path(spec: str) -> Path:
    """`fast`/`slow` name a shipped profile; anything else is a path to a TOML file."""
    shipped = PROFILES_DIR / f"{spec}.toml"
    if "/" not in spec and not spec.endswith(".toml") and shipped.is_file():
        return shipped
    path = Path(spec)
    if not path.is_file():
        names = ", ".join(sorted(p.stem for p in PROFILES_DIR.glob("*.toml")))
        raise BadInput(f"--profile {spec}: no such profile or file (shipped: {names})")
    return path


def load_profile(spec: str) -> dict[str, object]:
    """The overrides a profile file sets, type-checked against SimConfig."""
    path = profile_path(spec)
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise BadInput(f"{path}: not valid TOML ({exc})") from None
    overrides: dict[str, object] = {}
    for key, value in raw.items():
        if key not in FIELD_TYPES or key in _RUN_ONLY:
            raise BadInput(f"{path}: unknown setting '{key}'")
        overrides[key] = _coerce(f"{path}: {key}", FIELD_TYPES[key], value)
    return overrides


def _coerce(where: str, type_name: str, value: object) -> object:
    if type_name == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise BadInput(f"{where}: expected an integer, got {value!r}")
        return value
    if type_name == "float":
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise BadInput(f"{where}: expected a number, got {value!r}")
        return float(value)
    if type_name == "str":
        if not isinstance(value, str):
            raise BadInput(f"{where}: expected a string, got {value!r}")
        return value
    if type_name == "tuple[str, ...]":
        if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
            raise BadInput(f"{where}: expected a non-empty list of strings, got {value!r}")
        return tuple(value)
    raise BadInput(f"{where}: cannot be set here")


def build_config(profile: str | None, flags: dict[str, object]) -> SimConfig:
    """Defaults, then the profile, then the flags that were given (None = not given)."""
    values: dict[str, object] = load_profile(profile) if profile else {}
    values.update({key: value for key, value in flags.items() if value is not None and value != ()})
    config = SimConfig(**values)
    validate(config)
    return config


def validate(config: SimConfig) -> None:
    """Reject settings the engine cannot run with, naming the flag."""
    positive = ("max_num_seqs", "kv_cache_tokens", "max_prefill_tokens_per_step", "block_size")
    positive += ("output_len_median_tokens", "output_len_min_tokens", "output_len_max_tokens")
    for name in positive:
        if getattr(config, name) <= 0:
            raise BadInput(f"--{_flag(name)}: must be > 0, got {getattr(config, name)}")
    non_negative = ("prefill_ns_per_token", "decode_base_ms", "decode_per_seq_ms", "prefix_cache_blocks")
    non_negative += ("max_waiting", "retry_after_s", "message_overhead_tokens", "output_len_sigma")
    non_negative += ("spike_ms", "slow_first_token_ms", "reasoning_tokens", "reasoning_tokens_sigma")
    for name in non_negative:
        if getattr(config, name) < 0:
            raise BadInput(f"--{_flag(name)}: must be >= 0, got {getattr(config, name)}")
    for name in ("error_rate", "cut_rate", "stream_error_rate", "spike_rate", "slow_first_token_rate"):
        if not 0.0 <= getattr(config, name) <= 1.0:
            raise BadInput(f"--{_flag(name)}: must be within [0, 1], got {getattr(config, name)}")
    if config.output_len_min_tokens > config.output_len_max_tokens:
        raise BadInput("--output-len-min-tokens: must not exceed --output-len-max-tokens")
    if config.reasoning_field not in REASONING_FIELDS:
        raise BadInput(f"--reasoning-field: must be one of {', '.join(REASONING_FIELDS)}")
    if config.output_len_dist not in OUTPUT_LEN_DISTS:
        raise BadInput(f"--output-len-dist: must be one of {', '.join(OUTPUT_LEN_DISTS)}")
    if config.event_loop not in EVENT_LOOPS:
        raise BadInput(f"--loop: must be one of {', '.join(EVENT_LOOPS)}")
    if config.error_status not in ERROR_STATUSES:
        raise BadInput(f"--error-status: must be 500 or 503, got {config.error_status}")
    if not 0 <= config.port <= 65535:
        raise BadInput(f"--port: must be within 0..65535, got {config.port}")
    if config.decode_base_ns + config.decode_per_seq_ns <= 0:
        raise BadInput("--decode-base-ms and --decode-per-seq-ms: a step must take some time")


def _flag(name: str) -> str:
    return name.replace("_", "-")
