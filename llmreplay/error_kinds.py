"""The error taxonomy every stage uses (recorder, replayer, compare); free of heavy imports.

The replayer's light workers import it, so it must not import pyarrow or the trace format.
"""

from __future__ import annotations

# One taxonomy for every stage: the recorder sees some, the replayer others, compare reads all.
ERROR_KINDS = (
    "timeout",  # no answer (or no next chunk) within the configured time
    "connect_error",  # the TCP/TLS connection to the engine could not be made
    "connection_reset",  # the connection broke mid-request or mid-stream
    "http_4xx",  # a 4xx status other than 429
    "rate_limited_429",  # 429; Retry-After kept in retry_after_ms
    "http_5xx",  # any 5xx status
    "stream_error",  # an error object inside a 200 answer: an SSE `error` event, or a whole JSON body
    "stream_truncated",  # the stream ended without [DONE] or without a finish reason
    "cancelled",  # cancelled by the replayer, mirroring a production client disconnect
    "client_disconnected",  # the production client hung up mid-request (recorder)
    "invalid_response",  # a body that is not the OpenAI wire format
    "shed_by_client",  # not sent: the replayer's --max-inflight cap was reached
    "shutdown",  # in flight when the recorder or replayer was stopped
    "chain_broken",  # not sent: a chained Responses turn whose previous turn failed or gave no response id
)


def error_kind_for_status(status: int) -> str | None:
    """The taxonomy's kind for an HTTP error status (429, other 4xx, 5xx); None otherwise."""
    if status == 429:
        return "rate_limited_429"
    if 400 <= status < 500:
        return "http_4xx"
    if status >= 500:
        return "http_5xx"
    return None
