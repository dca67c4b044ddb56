"""How many tokens an answer gets, how many of them are reasoning, and why it ends (pure; the caller
passes the random source)."""

from __future__ import annotations

import math
import random

from llmreplay.sim.config import SimConfig
from llmreplay.sim.openai_request import CompletionRequest, InvalidRequest

REASONING_HEADER = "X-Sim-Reasoning-Tokens"  # a test hook: this request reasons exactly so many tokens


def draw_output_tokens(config: SimConfig, rng: random.Random) -> int:
    median = config.output_len_median_tokens
    if config.output_len_dist == "fixed":
        drawn = median
    elif config.output_len_dist == "uniform":
        drawn = rng.randint(config.output_len_min_tokens, config.output_len_max_tokens)
    else:
        drawn = round(median * math.exp(config.output_len_sigma * rng.gauss(0.0, 1.0)))
    return min(max(drawn, config.output_len_min_tokens), config.output_len_max_tokens)


def draw_reasoning_tokens(config: SimConfig, rng: random.Random, header: str | None) -> int:
    """Reasoning tokens before this request's answer: the header's, else a draw around the median."""
    if header is not None:
        if not header.strip().isdigit():
            raise InvalidRequest(
                f"{REASONING_HEADER}: {header!r} is not a token count", code="invalid_reasoning"
            )
        return int(header)
    median = config.reasoning_tokens
    if median == 0 or config.reasoning_tokens_sigma == 0:
        return median
    return max(0, round(median * math.exp(config.reasoning_tokens_sigma * rng.gauss(0.0, 1.0))))


def plan_output(
    request: CompletionRequest, config: SimConfig, rng: random.Random, reasoning_tokens: int = 0
) -> tuple[int, str]:
    """(completion tokens, reasoning included; finish_reason). Forced (ignore_eos, or min_tokens >=
    max_tokens): exactly max_tokens, "length". Otherwise the reasoning plus a draw from the configured
    distribution, raised to min_tokens and capped by max_tokens ("length" when capped, else "stop").
    A tool call ends with "tool_calls"."""
    cap = request.max_tokens
    forced = cap is not None and (request.ignore_eos or request.min_tokens >= cap)
    if forced:
        tokens, reason = cap, "length"
    else:
        tokens = max(draw_output_tokens(config, rng) + reasoning_tokens, request.min_tokens, 1)
        reason = "stop"
        if cap is not None and tokens >= cap:
            tokens, reason = cap, "length"
    if request.tool_name is not None:
        reason = "tool_calls"
    return tokens, reason


def reasoning_share(completion_tokens: int, reasoning_tokens: int) -> int:
    """The reasoning tokens of a `completion_tokens` answer: all asked for, but the answer keeps one."""
    return max(0, min(reasoning_tokens, completion_tokens - 1))
