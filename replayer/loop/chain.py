"""Chained Responses turns: the placeholder a chained body carries is replaced, at send time, by the
response id staging returned for the session's previous turn (Content-Length rewritten to match)."""

from __future__ import annotations

import orjson

from llmreplay.wire.responses_api import PREVIOUS_RESPONSE_PLACEHOLDER
from replayer.loop.http_pool import with_new_body

PLACEHOLDER_JSON = orjson.dumps(PREVIOUS_RESPONSE_PLACEHOLDER)  # as it stands in the body: quoted
CHAINED_DIALECT = "responses"


def is_chained(request: bytes) -> bool:
    """The encoded request's body names the previous turn's response by the placeholder."""
    return request.find(PLACEHOLDER_JSON) >= 0


def with_previous_response(request: bytes, response_id: str) -> bytes:
    """The request with the placeholder replaced by `response_id` (JSON-escaped) and its
    Content-Length (the last header, as http_pool.encode_request writes it) made to fit."""
    return with_new_body(request, lambda body: body.replace(PLACEHOLDER_JSON, orjson.dumps(response_id), 1))
