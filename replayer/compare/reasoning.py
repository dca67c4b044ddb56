"""How much of the output was reasoning, per side, and the finding when the split moved between sides.

A staging engine that reasons longer answers later (TTFO) with the same number of output tokens: the
TTFO verdict says what it costs, this finding says why. It is reported, never a failure by itself.
"""

from __future__ import annotations

import numpy as np

from replayer.compare.requests import RequestColumns

SHARE_MOVED = 0.05  # of the output tokens: a smaller change is not reported


def reasoning_share(requests: RequestColumns) -> float | None:
    """Reasoning tokens / output tokens over the successful requests that know both; None: none do."""
    known = (
        requests.success & np.isfinite(requests.reasoning_tokens) & np.isfinite(requests.completion_tokens)
    )
    total = float(np.sum(requests.completion_tokens[known]))
    return float(np.sum(requests.reasoning_tokens[known])) / total if total > 0 else None


def share_moved(sides: dict) -> str | None:
    """'reasoning share of output 17% -> 33%' when the two sides' shares differ by SHARE_MOVED or more."""
    baseline, candidate = (side.get("reasoning_share") for side in sides.values())
    if baseline is None or candidate is None or abs(candidate - baseline) < SHARE_MOVED:
        return None
    return f"reasoning share of output {baseline:.0%} -> {candidate:.0%}"
