"""The sim's capacity in closed form: saturation rate, steady-state batch, TPOT and the TPOT-limited rate.

Pure arithmetic over a SimConfig and a request mix (the engine model of engine.py, averaged); no I/O.
Fluid approximation: exact for fixed lengths at steady state, a mean-value estimate for a mix.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from llmreplay.errors import BadInput
from llmreplay.sim.config import SimConfig


@dataclass(frozen=True, slots=True)
class RequestClass:
    """Requests of one shape; `cached_tokens` are prompt tokens the prefix cache serves (not prefilled)."""

    prompt_tokens: int
    output_tokens: int
    cached_tokens: int = 0
    weight: float = 1.0


@dataclass(frozen=True, slots=True)
class RequestMix:
    """The lengths of the offered requests, as weighted classes (one class: fixed lengths)."""

    classes: tuple[RequestClass, ...]

    def __post_init__(self) -> None:
        if not self.classes or any(c.weight < 0 for c in self.classes) or self._total_weight() <= 0:
            raise BadInput("request mix: needs at least one class with a positive weight")
        if any(c.output_tokens < 1 or c.prompt_tokens < 0 for c in self.classes):
            raise BadInput("request mix: output tokens must be >= 1 and prompt tokens >= 0")
        if any(not 0 <= c.cached_tokens <= c.prompt_tokens for c in self.classes):
            raise BadInput("request mix: cached tokens must lie between 0 and the prompt tokens")

    @classmethod
    def fixed(cls, prompt_tokens: int, output_tokens: int, cached_tokens: int = 0) -> RequestMix:
        return cls((RequestClass(prompt_tokens, output_tokens, cached_tokens),))

    @classmethod
    def of_lengths(cls, prompt_tokens: Sequence[int], output_tokens: Sequence[int]) -> RequestMix:
        """One class per request (a trace's lengths, no prefix-cache hits assumed)."""
        if len(prompt_tokens) != len(output_tokens):
            raise BadInput("request mix: as many prompt lengths as output lengths are needed")
        return cls(tuple(RequestClass(p, o) for p, o in zip(prompt_tokens, output_tokens, strict=True)))

    def _total_weight(self) -> float:
        return sum(c.weight for c in self.classes)

    def mean(self, value) -> float:
        """The weighted mean of `value(class)` over the requests."""
        return sum(c.weight * value(c) for c in self.classes) / self._total_weight()

    @property
    def output_tokens(self) -> float:
        return self.mean(lambda c: c.output_tokens)

    @property
    def uncached_tokens(self) -> float:
        """Prompt tokens prefilled per request, on average."""
        return self.mean(lambda c: c.prompt_tokens - c.cached_tokens)

    @property
    def kv_token_steps(self) -> float:
        """KV tokens a request holds times the steps it holds them (reserved prompt + output, O steps)."""
        return self.mean(lambda c: (c.prompt_tokens + c.output_tokens) * c.output_tokens)


@dataclass(frozen=True, slots=True)
class Saturation:
    """The highest sustainable rate, what binds there, and the engine's state at that rate."""

    rate_per_s: float
    limited_by: str  # "slots" (max_num_seqs), "kv" (KV reservations) or "prefill" (admissions per step)
    batch_size: float
    step_s: float

    @property
    def tpot_s(self) -> float:
        return self.step_s


@dataclass(frozen=True, slots=True)
class SteadyState:
    """The engine at an offered rate; above saturation the queue grows and only `achieved` is served."""

    offered_rate_per_s: float
    achieved_rate_per_s: float
    output_tokens_per_s: float
    batch_size: float
    step_s: float
    saturated: bool

    @property
    def tpot_s(self) -> float:
        """Every running sequence writes one token per step, so TPOT is the mean step time."""
        return self.step_s


def _base_s(config: SimConfig) -> float:
    """The fixed part of a step, spikes averaged in."""
    return (config.decode_base_ms + config.spike_rate * config.spike_ms) / 1e3


def effective_slots(config: SimConfig, mix: RequestMix) -> tuple[float, str]:
    """Sequences that can run at once: batch slots, or fewer when the KV reservations fill the cache."""
    by_kv = config.kv_cache_tokens * mix.output_tokens / mix.kv_token_steps
    if len(mix.classes) == 1:
        by_kv = math.floor(by_kv)  # whole requests only
    if by_kv < config.max_num_seqs:
        return max(by_kv, 1.0), "kv"
    return float(config.max_num_seqs), "slots"


def step_s_at(config: SimConfig, mix: RequestMix, rate_per_s: float) -> float:
    """Mean step time at a sustainable rate: s = base + per_seq x max(b, 1) + prefill of the step's
    admissions, with b = rate x O x s (Little's law) and rate x s admissions per step. A running
    request is always in its own batch, hence max(b, 1)."""
    base_s, per_seq_s = _base_s(config), config.decode_per_seq_ms / 1e3
    prefill_s = config.prefill_ns_per_token / 1e9 * mix.uncached_tokens
    denominator = 1.0 - rate_per_s * (prefill_s + per_seq_s * mix.output_tokens)
    step_s = base_s / denominator if denominator > 0 else math.inf
    if rate_per_s * mix.output_tokens * step_s >= 1.0:
        return step_s
    return (base_s + per_seq_s) / (1.0 - rate_per_s * prefill_s)  # b < 1: the request alone, mostly


def saturation(config: SimConfig, mix: RequestMix) -> Saturation:
    """The rate at which every usable slot is busy (or admissions per step hit the prefill cap)."""
    base_s, per_seq_s = _base_s(config), config.decode_per_seq_ms / 1e3
    prefill_s = config.prefill_ns_per_token / 1e9 * mix.uncached_tokens
    slots, slot_limit = effective_slots(config, mix)
    by_slots = slots / (mix.output_tokens * (base_s + per_seq_s * slots) + slots * prefill_s)
    # a step admits requests while their uncached prompts fit max_prefill_tokens_per_step (one always)
    per_step = max(1.0, math.floor(config.max_prefill_tokens_per_step / max(mix.uncached_tokens, 1.0)))
    by_prefill = per_step / (base_s + per_step * (prefill_s + per_seq_s * mix.output_tokens))
    rate, limited_by = (by_slots, slot_limit) if by_slots <= by_prefill else (by_prefill, "prefill")
    step_s = step_s_at(config, mix, rate)
    return Saturation(rate, limited_by, rate * mix.output_tokens * step_s, step_s)


def steady_state(config: SimConfig, mix: RequestMix, rate_per_s: float) -> SteadyState:
    """Batch, step time (= TPOT) and throughput at an offered rate of requests per second."""
    if rate_per_s < 0:
        raise BadInput(f"rate: must be >= 0, got {rate_per_s}")
    limit = saturation(config, mix)
    achieved = min(rate_per_s, limit.rate_per_s)
    step_s = step_s_at(config, mix, achieved)
    return SteadyState(
        offered_rate_per_s=rate_per_s,
        achieved_rate_per_s=achieved,
        output_tokens_per_s=achieved * mix.output_tokens,
        batch_size=achieved * mix.output_tokens * step_s,
        step_s=step_s,
        saturated=rate_per_s > limit.rate_per_s,
    )


def max_rate_for_tpot(config: SimConfig, mix: RequestMix, tpot_s: float) -> float:
    """The largest sustainable rate whose TPOT stays <= `tpot_s` (0 when even one sequence is slower);
    never above saturation, where the queue grows without bound whatever the TPOT."""
    if tpot_s < step_s_at(config, mix, 0.0):
        return 0.0
    high = saturation(config, mix).rate_per_s
    if step_s_at(config, mix, high) <= tpot_s:
        return high
    low = 0.0
    for _ in range(60):  # the step time grows with the rate: bisect to float precision
        middle = (low + high) / 2
        low, high = (middle, high) if step_s_at(config, mix, middle) <= tpot_s else (low, middle)
    return low
