"""Replay settings: each field's default, flag, help and check, declared once; `replay`'s flags are built from them.

Light (no pyarrow, numpy or click): the worker processes import it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from llmreplay.engines import BY_NAME
from llmreplay.errors import BadInput
from llmreplay.http_headers import parse_env_headers, parse_headers
from llmreplay.options import duration, factor, http_url, option
from llmreplay.prometheus.config import ObserveConfig
from llmreplay.tokenizers import DEFAULT_TOKENIZER
from replayer.judge.gate_limits import FidelityLimits, max_error_rate_field

ENGINES = ("detect", *BY_NAME)  # llmreplay.engines: one row per engine
NS_PER_S = 1_000_000_000
SERVER_METRICS_OFF = "none"  # --server-metrics none: scrape nothing, not even the target's own


def parse_server_metrics(text: str, flag: str) -> str:
    """A URL (checked by llmreplay.options.http_url) or SERVER_METRICS_OFF."""
    if text.strip().lower() == SERVER_METRICS_OFF:
        return SERVER_METRICS_OFF
    http_url(text, flag)
    return text


def parse_model_map(values: tuple[str, ...], flag: str) -> tuple[tuple[str, str], ...]:
    """`PROD=STAGING` strings -> (prod, staging) pairs; `*=STAGING` stands for every model."""
    pairs: dict[str, str] = {}
    for value in values:
        prod, sep, staging = (part.strip() for part in value.partition("="))
        if not sep or not prod or not staging or "=" in staging or staging == "*":
            raise BadInput(
                f"{flag} {value!r}: expected PROD=STAGING (model names, or *=STAGING for every model)"
            )
        if pairs.get(prod, staging) != staging:
            raise BadInput(f"{flag}: {prod!r} mapped twice ({pairs[prod]!r} and {staging!r})")
        pairs[prod] = staging
    return tuple(pairs.items())


@dataclass(frozen=True, slots=True)
class ScheduleConfig:
    """How the trace's time axis and load are transformed into a schedule (pure planning)."""

    speed: float = option(1.0, type=float, check=factor, help="Time factor: 2 sends twice as fast.")
    scale: float = option(
        1.0, type=float, check=factor, help="Load factor on sessions: 0.5 keeps half, 2 adds a copy of each."
    )
    seed: int = option(0, type=int, help="Seed of --scale sampling, copy jitter and copy nonces.")
    copy_jitter_ns: int = option(
        1 * NS_PER_S,
        flags=("--copy-jitter",),
        help="Bound of the seeded shift of --scale copies.",
        **duration(allow_zero=True),
    )
    from_offset_ns: int | None = option(
        None,
        flags=("--from",),
        help="Start of the trace window, from its first request.",
        **duration(allow_zero=True),
    )
    to_offset_ns: int | None = option(
        None, flags=("--to",), help="End of the trace window, from its first request.", **duration()
    )
    limit: int | None = option(None, type=int, metavar="N", help="Send at most N trace rows.")
    max_idle_gap_ns: int | None = option(
        None,
        flags=("--max-idle-gap",),
        help="Cut idle stretches longer than this.",
        **duration(allow_zero=True),
    )
    cancellations: bool = option(
        True,
        flags=("--no-cancellations",),
        flag_value=False,
        help="Do not mirror production client disconnects.",
    )
    warmup_ns: int = option(
        0,
        flags=("--warmup",),
        help="Replay this much of the trace before the measured window first, left out of every verdict.",
        **duration(allow_zero=True),
    )
    soak_ns: int | None = option(
        None,
        flags=("--soak",),
        help="Replay the measured window in a loop for this long (each loop with fresh nonces).",
        **duration(),
    )
    soak_keep_sharing: bool = option(
        False,
        flag_value=True,
        help="With --soak: every loop sends the same prompts (caches shared across loops).",
    )


MAX_SHARDS = 1000  # hosts of one replay: more than any replay needs, and the split's load table fits
MAX_START_AHEAD_NS = 24 * 3600 * NS_PER_S  # a --start-at further out would only wait, silently
START_AT_PAST_NS = 50_000_000  # a shared start this far past: a host would start behind the others


def parse_shard(text: str, flag: str) -> tuple[int, int]:
    """`K/N` (0 <= K < N <= MAX_SHARDS) -> (K, N)."""
    index, sep, count = text.partition("/")
    try:
        k, n = int(index), int(count)
    except ValueError:
        k, n = -1, 0
    if not sep or n < 1 or not 0 <= k < n:
        raise BadInput(f"{flag} {text!r}: expected K/N with 0 <= K < N, e.g. 0/4 (the first of four hosts)")
    if n > MAX_SHARDS:
        raise BadInput(f"{flag} {text!r}: {n:,} shards; at most {MAX_SHARDS:,} hosts replay one trace")
    return k, n


def parse_start_at(text: str, flag: str) -> int:
    """Unix seconds (`1767225600.5`) or ISO 8601 with a zone (`2026-12-01T15:00:00Z`) -> unix ns,
    within the next MAX_START_AHEAD_NS (a start in the past or days ahead is refused here, at the flag)."""
    import datetime
    import math
    import time

    try:
        seconds = float(text)
    except ValueError:
        seconds = None
    if seconds is not None:
        if not math.isfinite(seconds):
            raise BadInput(f"{flag} {text!r}: not a number of unix seconds")
        if abs(seconds) > 1e11:  # past the year 5000: nanoseconds beyond int64
            raise BadInput(f"{flag} {text!r}: past the year 5000; a shared start must be within 24 hours")
        start_ns = int(round(seconds * NS_PER_S))
    else:
        try:
            when = datetime.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
        except ValueError:
            when = None
        if when is None or when.tzinfo is None:
            raise BadInput(
                f"{flag} {text!r}: expected unix seconds or an ISO 8601 time with a zone, "
                "e.g. 2026-12-01T15:00:00Z"
            )
        start_ns = int(when.timestamp()) * NS_PER_S + when.microsecond * 1000
    from llmreplay.durations import format_duration

    ahead_ns = start_ns - time.time_ns()
    if ahead_ns > MAX_START_AHEAD_NS:
        raise BadInput(
            f"{flag} {text!r}: {format_duration(ahead_ns)} from now; a shared start must be within "
            "24 hours (start the hosts closer to it)"
        )
    if ahead_ns < -START_AT_PAST_NS:
        raise BadInput(
            f"{flag} {text!r}: {format_duration(-ahead_ns)} ago; a shared start must lie ahead "
            "(a host started after it would replay behind the others)"
        )
    return start_ns


@dataclass(frozen=True, slots=True)
class MultiHostConfig:
    """One shard of a replay spread over hosts (replayer.plan.host_shards), started together."""

    shard: tuple[int, int] | None = option(
        None,
        parse=parse_shard,
        metavar="K/N",
        help="Replay shard K of N (whole sessions, packed by busiest second).",
    )
    start_at_ns: int | None = option(
        None,
        flags=("--start-at",),
        parse=parse_start_at,
        metavar="TIME",
        help="Start the schedule at this wall-clock time (unix seconds or ISO 8601), paced on the monotonic clock.",
    )
    start_barrier: str | None = option(
        None,
        metavar="URL",
        check=http_url,
        help="Start when `llmreplay barrier` at URL releases every shard (and measure this clock against it).",
    )
    barrier_timeout_ns: int = option(
        1800 * NS_PER_S, flags=("--barrier-timeout",), help="Longest wait at --start-barrier.", **duration()
    )
    ray_address: str | None = option(
        None, flags=("--ray",), metavar="ADDRESS", help="Run --shards shards on a Ray cluster, one a node."
    )
    shards: int | None = option(None, type=int, metavar="N", help="With --ray: how many shards (nodes).")


@dataclass(frozen=True, slots=True)
class ReplayConfig:
    """Everything one replay run needs. `api_key` and header values never reach a file."""

    trace_path: str
    target_url: str = option(
        flags=("--target",),
        required=True,
        metavar="URL",
        help="Base URL of the OpenAI-compatible engine, e.g. http://127.0.0.1:8000",
    )
    run_dir: str = option(
        flags=("-o", "--out"), required=True, metavar="DIR", help="Run directory to create."
    )
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)
    workers: int = option(1, type=int, help="Processes, each owning a shard of the sessions.")
    max_inflight: int = option(
        10_000, type=int, help="Cap on open requests for the whole run; above it requests are shed."
    )  # split evenly between workers
    duration_ns: int | None = option(
        None,
        flags=("--duration",),
        help="Stop sending after this long; later requests are not built.",
        **duration(),
    )
    grace_ns: int = option(
        30 * NS_PER_S,
        flags=("--grace",),
        help="After a stop, wait this long for in-flight requests.",
        **duration(allow_zero=True),
    )
    engine: str = option("detect", choices=ENGINES, help="Fields that force output length.")
    model: str | None = option(None, help="Model name to send, overriding the trace's.")
    model_map: tuple[tuple[str, str], ...] = option(
        (),
        flags=("--model-map",),
        multiple=True,
        parse=parse_model_map,
        metavar="PROD=STAGING",
        help="Send the trace's model PROD as STAGING, keeping the per-model mix (repeatable; *=STAGING: all).",
    )
    session_header: str | None = option(
        None, help="Send the session id in this header (e.g. X-Session-Affinity)."
    )
    headers: tuple[tuple[str, str], ...] = option(
        (),
        flags=("--header",),
        multiple=True,
        parse=parse_headers,
        repr=False,
        help="Extra header NAME:VALUE (repeatable; values never logged).",
    )
    env_headers: tuple[tuple[str, str], ...] = option(
        (),
        flags=("--header-from-env",),
        multiple=True,
        parse=parse_env_headers,
        repr=False,
        metavar="NAME:ENV",
        help="Extra header NAME whose value is the environment variable ENV (repeatable): a secret "
        "header kept out of the command line.",
    )
    api_key: str | None = option(
        None,
        envvar=("LLMREPLAY_API_KEY", "OPENAI_API_KEY"),
        parse=lambda text, flag: text or None,
        repr=False,
        help="Bearer token (or env LLMREPLAY_API_KEY / OPENAI_API_KEY); never written anywhere.",
    )
    tokenizer: str | None = option(
        None,
        show="auto",
        help=(
            "Tokenizer prompts are spelled for. auto: the target's own /tokenize (exact, chat template "
            f"included), else calibrated from 24 probe requests; or {DEFAULT_TOKENIZER}, tiktoken:NAME, "
            "a tokenizer.json (then calibrated on the target too)."
        ),
    )
    fit_lengths: bool = option(
        False,
        flag_value=True,
        help="Respell recorded content from its shape so the target counts the recorded prompt lengths.",
    )
    responses_state: str = option(
        "chain",
        choices=("chain", "expand"),
        help=(
            "Responses turns chained by previous_response_id: chain sends each with the id staging returned "
            "to the session's previous turn; expand sends the whole history instead."
        ),
    )
    connect_timeout_ns: int = option(
        30 * NS_PER_S, flags=("--connect-timeout",), help="TCP connect timeout.", **duration()
    )
    read_timeout_ns: int = option(
        600 * NS_PER_S, flags=("--read-timeout",), help="Longest silence within one response.", **duration()
    )
    server_metrics_url: str | None = option(
        None,
        flags=("--server-metrics",),
        metavar="URL|none",
        parse=parse_server_metrics,
        show="the target's own metrics path, when its engine has one",
        help=f"Prometheus URL to scrape every second during the run (checked before the clock starts); "
        f"{SERVER_METRICS_OFF}: no scraping.",
    )
    skip_preflight: bool = option(
        False,
        flag_value=True,
        help=(
            "Send no preflight requests (engine version, length forcing, cached tokens, context, features) "
            "and ask no /tokenize: prompts are spelled for --tokenizer (or the default), unchecked."
        ),
    )
    server_metrics_interval_ns: int = 1 * NS_PER_S
    early_wake_ns: int = 1_000_000  # wake this early from the timer, then spin to the deadline
    warm_connections: int = 32  # keep-alive connections per worker, opened before the clock starts
    # the run's own gate, as `report` judges it (replayer.judge.gate_limits)
    limits: FidelityLimits = field(default_factory=FidelityLimits)
    max_error_rate: float = max_error_rate_field()
    start_delay_ns: int = 500_000_000  # between "all workers ready" and offset 0 (connection warm-up)
    quiet: bool = option(
        False, flag_value=True, help="No progress display and no table: the one-line verdict only."
    )
    multihost: MultiHostConfig = field(default_factory=MultiHostConfig)
    observe: ObserveConfig = field(default_factory=ObserveConfig)  # Prometheus: live and after the run

    @property
    def sent_headers(self) -> tuple[tuple[str, str], ...]:
        """The extra headers every request carries: --header's, then --header-from-env's."""
        return self.headers + self.env_headers

    def public_dict(self) -> dict:
        """The configuration for run.json: no API key, header names only (values may be secrets)."""
        data = dataclasses.asdict(self)
        data.pop("api_key")
        data.pop("env_headers")
        data["api_key_set"] = self.api_key is not None
        data["headers"] = sorted({name for name, _ in self.sent_headers})
        data["observe"] = self.observe.public_dict()
        return data
