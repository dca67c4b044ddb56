"""How many tokens an answer gets, and why it ends (pure; the caller passes the random source).

Forced (ignore_eos, or min_tokens >= max_tokens): exactly max_tokens, finish "length".
Otherwise a draw from the configured distribution, raised to min_tokens and capped by
max_tokens ("length" when capped, else "stop"). A tool call ends with "tool_calls".
"""

from __future__ import annotations

import math
import random

from llmreplay.sim.config import SimConfig
from llmreplay.sim.openai_request import CompletionRequest


def draw_output_tokens(config: SimConfig, rng: random.Random) -> int:
    median = config.output_len_median_tokens
    if config.output_len_dist == "fixed":
        drawn = median
    elif config.output_len_dist == "uniform":
        drawn = rng.randint(config.output_len_min_tokens, config.output_len_max_tokens)
    else:
        drawn = round(median * math.exp(config.output_len_sigma * rng.gauss(0.0, 1.0)))
    return min(max(drawn, config.output_len_min_tokens), config.output_len_max_tokens)


def plan_output(request: CompletionRequest, config: SimConfig, rng: random.Random) -> tuple[int, str]:
    """(completion tokens, finish_reason)."""
    cap = request.max_tokens
    forced = cap is not None and (request.ignore_eos or request.min_tokens >= cap)
    if forced:
        tokens, reason = cap, "length"
    else:
        tokens = max(draw_output_tokens(config, rng), request.min_tokens, 1)
        reason = "stop"
        if cap is not None and tokens >= cap:
            tokens, reason = cap, "length"
    if request.tool_name is not None:
        reason = "tool_calls"
    return tokens, reason
