"""How much of the output was reasoning, per side (the verdict's finding when it moved:
replayer.judge.verdict.share_moved)."""

from __future__ import annotations

import numpy as np

from replayer.measured.requests import RequestColumns


def reasoning_share(requests: RequestColumns) -> float | None:
    """Reasoning tokens / output tokens over the successful requests that know both; None: none do."""
    known = (
        requests.success & np.isfinite(requests.reasoning_tokens) & np.isfinite(requests.completion_tokens)
    )
    total = float(np.sum(requests.completion_tokens[known]))
    return float(np.sum(requests.reasoning_tokens[known])) / total if total > 0 else None
