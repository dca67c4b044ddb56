"""Failure injection: what goes wrong with one request, from the X-Sim-Fault test hook or by chance.

FAULTS is the table: one row per fault — its X-Sim-Fault value, when it acts, what it does and the
SimConfig field that draws it at random. Adding a fault is adding a row (and its test).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from llmreplay.sim.config import SimConfig
from llmreplay.sim.openai_request import InvalidRequest

FAULT_HEADER = "X-Sim-Fault"  # always honoured: a test hook, not an OpenAI feature
HEADER_STOP_AFTER_TOKENS = 3
IMMEDIATE = "immediate"  # answered at once, without running the engine
STREAM = "stream"  # acts after `stop_after_tokens` delivered tokens
DELAY = "delay"  # holds the request before it enters the engine (header `slow:<ms>`)


@dataclass(frozen=True, slots=True)
class FaultKind:
    name: str  # the X-Sim-Fault value and the ground-truth log's `fault`
    phase: str  # IMMEDIATE | STREAM | DELAY
    does: str
    rate_flag: str | None = None  # the SimConfig field drawing it at random; None: header only
    status: int | None = None  # an immediate error answer: its status, OpenAI code and message
    code: str = ""
    message: str = ""
    outcome: str | None = None  # a STREAM fault: the sequence's outcome in the ground-truth log


FAULTS: tuple[FaultKind, ...] = (
    FaultKind(
        "500",
        IMMEDIATE,
        "HTTP 500 server_error",
        "error_rate",
        500,
        "simulated_error",
        "simulated engine failure",
    ),
    FaultKind(
        "503",
        IMMEDIATE,
        "HTTP 503 server_error",
        "error_rate",
        503,
        "simulated_error",
        "simulated engine failure",
    ),
    FaultKind(
        "429",
        IMMEDIATE,
        "HTTP 429 with Retry-After",
        None,
        429,
        "rate_limit_exceeded",
        "simulated rate limit",
    ),
    FaultKind(
        "400",
        IMMEDIATE,
        "HTTP 400 invalid_request_error, as an engine refusing a prompt beyond its context",
        None,
        400,
        "context_length_exceeded",
        "simulated refusal: the prompt does not fit the model's context",
    ),
    FaultKind("invalid", IMMEDIATE, "HTTP 200 with an HTML body: not the OpenAI wire format"),
    FaultKind("hang", IMMEDIATE, "no answer until the sim stops: the client must time out"),
    FaultKind("cut", STREAM, "the connection aborted (RST) after a few tokens", "cut_rate", outcome="cut"),
    FaultKind(
        "truncate", STREAM, "the stream ends cleanly after a few tokens, without [DONE]", outcome="truncated"
    ),
    FaultKind(
        "stream_error",
        STREAM,
        "an SSE error object inside the 200 stream after a few tokens",
        "stream_error_rate",
        outcome="stream_error",
    ),
    FaultKind(
        "slow", DELAY, "slow:<ms>: the request waits <ms> before entering the engine", "slow_first_token_ms"
    ),
)
BY_NAME = {fault.name: fault for fault in FAULTS}
STREAM_OUTCOMES = {f.name: f.outcome for f in FAULTS if f.phase == STREAM}
HEADER_VALUES = ", ".join("slow:<ms>" if f.phase == DELAY else f.name for f in FAULTS)


@dataclass(frozen=True, slots=True)
class Fault:
    kind: str | None = None  # a FAULTS name; None: no fault (maybe a slow first token only)
    stop_after_tokens: int = 0  # for STREAM faults, capped below the answer's length by the caller
    first_token_delay_ms: float = 0.0

    @property
    def label(self) -> str | None:
        """What the ground-truth log records as the injected fault."""
        if self.kind is None and self.first_token_delay_ms:
            return "slow"
        return self.kind


def parse_fault_header(value: str) -> Fault:
    value = value.strip()
    row = BY_NAME.get(value)
    if row is not None and row.phase != DELAY:
        return Fault(value, HEADER_STOP_AFTER_TOKENS)
    if value.startswith("slow:"):
        try:
            delay_ms = float(value.removeprefix("slow:"))
        except ValueError:
            delay_ms = -1.0
        if delay_ms >= 0:
            return Fault(None, 0, delay_ms)
    raise InvalidRequest(f"{FAULT_HEADER}: {value!r} is not one of {HEADER_VALUES}", code="invalid_fault")


def immediate_error(fault: Fault) -> InvalidRequest | None:
    """The error answer of an IMMEDIATE fault that has a status; None for every other fault."""
    row = BY_NAME.get(fault.kind) if fault.kind else None
    if row is None or row.status is None:
        return None
    return InvalidRequest(row.message, row.status, row.code)


def draw_fault(config: SimConfig, stream: bool, target_tokens: int, rng: random.Random) -> Fault:
    """The random faults configured by flags; each is off when its rate is 0."""
    if config.error_rate and rng.random() < config.error_rate:
        return Fault(str(config.error_status))
    kind = None
    for row in FAULTS:
        rate = getattr(config, row.rate_flag) if row.phase == STREAM and row.rate_flag else 0
        if stream and rate and rng.random() < rate:
            kind = row.name
            break
    stop_after = rng.randint(0, max(target_tokens - 1, 0)) if kind else 0
    delay_ms = 0.0
    if config.slow_first_token_ms and rng.random() < config.slow_first_token_rate:
        delay_ms = config.slow_first_token_ms
    return Fault(kind, stop_after, delay_ms)
