"""The X-Request-ID of every request llmreplay itself sends a target besides the replayed traffic
(the /v1/models and engine probes, the preflight, the length calibration, /tokenize calls), so
staging's logs can tell them from traffic by the prefix: `llmreplay-probe-<purpose>-<n>`."""

from __future__ import annotations

import itertools
import threading

PROBE_ID_PREFIX = "llmreplay-probe-"
HEADER = "X-Request-ID"

_counters: dict[str, itertools.count] = {}
_lock = threading.Lock()


def probe_request_id(purpose: str, n: int | None = None) -> str:
    """`llmreplay-probe-<purpose>-<n>`; without `n`, the next number of this purpose in this process."""
    if n is None:
        with _lock:
            n = next(_counters.setdefault(purpose, itertools.count(1)))
    return f"{PROBE_ID_PREFIX}{purpose}-{n}"


def probe_headers(purpose: str, n: int | None = None) -> dict[str, str]:
    """The headers naming one probe request as llmreplay's (see probe_request_id)."""
    return {HEADER: probe_request_id(purpose, n)}
