"""Failure injection: what goes wrong with one request, from the X-Sim-Fault test hook or by chance.

`X-Sim-Fault` (always honoured; a test hook, not an OpenAI feature) takes one of:
500, 503, 429, cut, truncate, stream_error, invalid, hang, slow:<ms>.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from llmreplay.sim.config import SimConfig
from llmreplay.sim.openai_request import InvalidRequest

FAULT_HEADER = "X-Sim-Fault"
IMMEDIATE_KINDS = ("500", "503", "429", "invalid", "hang")  # answered without running the engine
STREAM_KINDS = ("cut", "truncate", "stream_error")  # act after `stop_after_tokens` delivered tokens
HEADER_STOP_AFTER_TOKENS = 3


@dataclass(frozen=True, slots=True)
class Fault:
    kind: str | None = None  # None: no fault (maybe a slow first token only)
    stop_after_tokens: int = 0  # for STREAM_KINDS, capped below the answer's length by the caller
    first_token_delay_ms: float = 0.0

    @property
    def label(self) -> str | None:
        """What the ground-truth log records as the injected fault."""
        if self.kind is None and self.first_token_delay_ms:
            return "slow"
        return self.kind


def parse_fault_header(value: str) -> Fault:
    value = value.strip()
    if value in IMMEDIATE_KINDS or value in STREAM_KINDS:
        return Fault(value, HEADER_STOP_AFTER_TOKENS)
    if value.startswith("slow:"):
        try:
            delay_ms = float(value.removeprefix("slow:"))
        except ValueError:
            delay_ms = -1.0
        if delay_ms >= 0:
            return Fault(None, 0, delay_ms)
    raise InvalidRequest(
        f"{FAULT_HEADER}: {value!r} is not one of 500, 503, 429, cut, truncate, stream_error, "
        "invalid, hang, slow:<ms>",
        code="invalid_fault",
    )


def draw_fault(config: SimConfig, stream: bool, target_tokens: int, rng: random.Random) -> Fault:
    """The random faults configured by flags; each is off when its rate is 0."""
    if config.error_rate and rng.random() < config.error_rate:
        return Fault(str(config.error_status))
    kind = None
    if stream and config.cut_rate and rng.random() < config.cut_rate:
        kind = "cut"
    elif stream and config.stream_error_rate and rng.random() < config.stream_error_rate:
        kind = "stream_error"
    stop_after = rng.randint(0, max(target_tokens - 1, 0)) if kind else 0
    delay_ms = 0.0
    if config.slow_first_token_ms and rng.random() < config.slow_first_token_rate:
        delay_ms = config.slow_first_token_ms
    return Fault(kind, stop_after, delay_ms)
