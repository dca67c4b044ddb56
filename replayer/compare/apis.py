"""Like with like across APIs: the sides' endpoints (chat, completions, Responses, Messages) must match
unless --allow-different-api; usage is normalised at the edges (llmreplay.wire.usage), so prompt
tokens are what the engine processed on either side. Pure.
"""

from __future__ import annotations

import numpy as np

from llmreplay.errors import BadInput


def endpoint_mix(endpoints: np.ndarray) -> dict[str, int]:
    """Requests per endpoint value of one side."""
    names, counts = np.unique(endpoints.astype(str), return_counts=True)
    return {str(n): int(c) for n, c in zip(names, counts, strict=True)}


def api_section(b_endpoints: np.ndarray, c_endpoints: np.ndarray, allowed: bool, c_label: str) -> dict:
    """Each side's endpoint mix; BadInput (one line) when they differ and `allowed` is not set."""
    baseline, candidate = endpoint_mix(b_endpoints), endpoint_mix(c_endpoints)
    same = set(baseline) == set(candidate)
    if not same and not allowed:
        raise BadInput(
            f"baseline sent {'/'.join(sorted(baseline)) or 'nothing'}, {c_label} "
            f"{'/'.join(sorted(candidate)) or 'nothing'}: different APIs are compared only with "
            "--allow-different-api (usage is normalised: prompt tokens as each engine processed them)"
        )
    return {"baseline": baseline, "candidate": candidate, "same": same, "allowed": allowed}
