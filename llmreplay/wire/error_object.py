"""A 200 answer (a whole JSON body or one SSE event) that carries an OpenAI error object instead of output.

One rule for the recorder and the replayer, so production and staging count such answers alike.
"""

from __future__ import annotations


def error_object_kind(body: dict) -> str | None:
    """The kind `stream_error` when `body` is an error object rather than an answer; None otherwise."""
    if body.get("error") is not None and not body.get("choices") and "data" not in body:
        return "stream_error"
    return None


def error_text(error) -> str:
    """The error's message (or the whole object), at most 200 characters."""
    if isinstance(error, dict):
        error = error.get("message") or error.get("type") or error
    return str(error)[:200]
