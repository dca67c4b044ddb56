"""Every parameter of the simulated engine: its default, flag, help and check, declared once on its field.

Precedence: field defaults < profile file (TOML, keys are field names) < flags given.
"""

from __future__ import annotations

import dataclasses
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from llmreplay import options
from llmreplay.errors import BadInput
from llmreplay.options import fraction, non_negative, option, positive
from llmreplay.tokenizers import DEFAULT_TOKENIZER
from llmreplay.trace_format import DEFAULT_BLOCK_SIZE
from llmreplay.wire.channels import REASONING, text_keys

PROFILES_DIR = Path(__file__).parent / "profiles"
OUTPUT_LEN_DISTS = ("fixed", "uniform", "lognormal")
EVENT_LOOPS = ("uvloop", "asyncio")
PROMPT_COUNTS = ("tokenizer", "chars/4")
ERROR_STATUSES = (500, 503)
REASONING_FIELDS = text_keys(REASONING)


def _one_of(choices: tuple) -> Callable[[object, str], None]:
    def check(value, flag: str) -> None:
        if value not in choices:
            raise BadInput(f"{flag}: must be one of {', '.join(map(str, choices))}, got {value}")

    return check


@dataclass(frozen=True, slots=True)
class SimConfig:
    """All knobs of `llmreplay sim`. Times: `*_ns` integers, `*_ms` floats (milliseconds)."""

    host: str = option("127.0.0.1", help="Address to listen on.")
    port: int = option(8000, type=int, int_range=(0, 65535), help="Port to listen on.")
    log_path: str | None = option(
        None,
        flags=("--log",),
        help="Ground-truth Parquet (one row per request); steps go to <stem>.steps.parquet.",
    )
    models: tuple[str, ...] = option(
        ("sim-model",), flags=("--model",), multiple=True, help="Model name to serve (repeatable)."
    )
    seed: int = option(0, type=int, help="Seed for output lengths, faults and spikes.")
    tokenizer: str = option(
        DEFAULT_TOKENIZER,
        help="Tokenizer counting prompt tokens: mistral-tekken, tiktoken:<enc>, tokenizer.json.",
    )
    message_overhead_tokens: int = option(
        0, type=int, check=non_negative, help="Tokens added per chat message, like a chat template."
    )
    prompt_count: str = option(
        "tokenizer",
        choices=PROMPT_COUNTS,
        check=_one_of(PROMPT_COUNTS),
        help="How prompt tokens are counted: by --tokenizer, or one per 4 characters of each text (rounded "
        "up), like a server whose tokenizer the client does not have.",
    )
    serve_tokenize: bool = option(
        True,
        flags=("--no-tokenize",),
        flag_value=False,
        help="Serve no /tokenize or /detokenize (404), like a gateway, TensorRT-LLM or a hosted API.",
    )
    request_id_log: str | None = option(
        None,
        help="Append each request's method, path and X-Request-ID to this file, one JSON line each (for tests).",
    )
    # engine: continuous batching with an affine step-time model
    max_num_seqs: int = option(64, type=int, check=positive, help="Batch slots: sequences running at once.")
    kv_cache_tokens: int = option(
        1_048_576,
        type=int,
        check=positive,
        help="KV budget in tokens; a request reserves prompt + output tokens.",
    )
    max_prefill_tokens_per_step: int = option(
        16_384,
        type=int,
        check=positive,
        help="Uncached prompt tokens admitted per step (at least one request).",
    )  # chunked prefill
    prefill_ns_per_token: int = option(
        20_000, type=int, check=non_negative, help="Step time per uncached prompt token, in nanoseconds."
    )
    decode_base_ms: float = option(
        5.0, type=float, check=non_negative, help="Fixed time of every step, in milliseconds."
    )
    decode_per_seq_ms: float = option(
        0.05, type=float, check=non_negative, help="Step time per running sequence, in milliseconds."
    )
    prefix_cache_blocks: int = option(
        4096, type=int, check=non_negative, help="Prefix cache size in blocks (0 disables it)."
    )
    block_size: int = option(
        DEFAULT_BLOCK_SIZE,
        type=int,
        check=positive,
        help="Prefix block size in tokens, as in llmreplay.prefix_hash.",
    )
    max_waiting: int = option(
        1024,
        type=int,
        check=non_negative,
        help="Waiting-queue limit; beyond it requests get 429 with Retry-After.",
    )
    retry_after_s: int = option(
        1,
        type=int,
        check=non_negative,
        int_range=(0, 10**40),  # beyond any clock on purpose: a hostile Retry-After is what the recorder's tests send
        help="Retry-After seconds sent with 429.",
    )
    response_store_tokens: int = option(
        8_000_000,
        type=int,
        check=non_negative,
        help="Token ids kept of stored responses, for previous_response_id (oldest dropped first).",
    )
    # output length when max_tokens does not force it
    output_len_dist: str = option(
        "lognormal",
        choices=OUTPUT_LEN_DISTS,
        check=_one_of(OUTPUT_LEN_DISTS),
        help="Output length when not forced.",
    )
    output_len_median_tokens: int = option(
        128, type=int, check=positive, help="Median (lognormal) or value (fixed) of the output length."
    )
    output_len_sigma: float = option(
        0.7, type=float, check=non_negative, help="Lognormal shape of the output length."
    )
    output_len_min_tokens: int = option(1, type=int, check=positive, help="Shortest drawn output.")
    output_len_max_tokens: int = option(2048, type=int, check=positive, help="Longest drawn output.")
    # reasoning streamed before each chat answer, off by default; header X-Sim-Reasoning-Tokens sets one request's
    reasoning_tokens: int = option(
        0, type=int, check=non_negative, help="Median reasoning tokens before each chat answer (0: none)."
    )
    reasoning_tokens_sigma: float = option(
        0.0, type=float, check=non_negative, help="Lognormal shape of the reasoning length (0: fixed)."
    )
    reasoning_field: str = option(
        "reasoning",
        choices=REASONING_FIELDS,
        check=_one_of(REASONING_FIELDS),
        help="Delta key of reasoning: reasoning (vLLM, Ollama) or reasoning_content (SGLang, llama.cpp).",
    )
    # failure injection, all off by default
    error_rate: float = option(
        0.0, type=float, check=fraction, help="Share of requests answered with --error-status at once."
    )
    error_status: int = option(
        500,
        choices=tuple(map(str, ERROR_STATUSES)),
        parse=lambda text, flag: int(text),
        check=_one_of(ERROR_STATUSES),
        help="Status for --error-rate.",
    )
    cut_rate: float = option(
        0.0, type=float, check=fraction, help="Share of streams cut mid-response (connection aborted)."
    )
    stream_error_rate: float = option(
        0.0,
        type=float,
        check=fraction,
        help="Share of streams sending an SSE error object inside the 200 stream.",
    )
    spike_rate: float = option(
        0.0, type=float, check=fraction, help="Share of engine steps that take --spike-ms longer."
    )
    spike_ms: float = option(
        0.0, type=float, check=non_negative, help="Extra time of a spiked step, in milliseconds."
    )
    slow_first_token_ms: float = option(
        0.0, type=float, check=non_negative, help="Delay before a request enters the engine, in milliseconds."
    )
    slow_first_token_rate: float = option(
        1.0, type=float, check=fraction, help="Share of requests delayed by --slow-first-token-ms."
    )
    event_loop: str = option(
        "uvloop",
        flags=("--loop",),
        choices=EVENT_LOOPS,
        check=_one_of(EVENT_LOOPS),
        help="Event loop implementation.",
    )

    @property
    def decode_base_ns(self) -> int:
        return round(self.decode_base_ms * 1e6)

    @property
    def decode_per_seq_ns(self) -> int:
        return round(self.decode_per_seq_ms * 1e6)


FIELD_TYPES = {f.name: f.type for f in dataclasses.fields(SimConfig)}
# Settings that describe one run, not an engine: flags only, never a profile.
_RUN_ONLY = ("host", "port", "log_path", "event_loop", "request_id_log")


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
    if type_name == "bool":
        if not isinstance(value, bool):
            raise BadInput(f"{where}: expected true or false, got {value!r}")
        return value
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
    """Reject settings the engine cannot run with, naming the flag (profile values included)."""
    options.check(config)
    if config.output_len_min_tokens > config.output_len_max_tokens:
        raise BadInput("--output-len-min-tokens: must not exceed --output-len-max-tokens")
    if config.decode_base_ns + config.decode_per_seq_ns <= 0:
        raise BadInput("--decode-base-ms and --decode-per-seq-ms: a step must take some time")
