"""Chained Responses turns: the placeholder a chained body carries is replaced, at send time, by the
response id staging returned for the session's previous turn (Content-Length rewritten to match)."""

from __future__ import annotations

import orjson

from llmreplay.openai_wire.responses_api import PREVIOUS_RESPONSE_PLACEHOLDER
from replayer.loop.answer_echo import with_body
from replayer.loop.request_file import HEADER_END

PLACEHOLDER_JSON = orjson.dumps(PREVIOUS_RESPONSE_PLACEHOLDER)  # as it stands in the body: quoted
CHAINED_DIALECT = "responses"


def is_chained(request: bytes) -> bool:
    """The encoded request's body names the previous turn's response by the placeholder."""
    return request.find(PLACEHOLDER_JSON) >= 0


def with_previous_response(request: bytes, response_id: str) -> bytes:
    """The request with the placeholder replaced by `response_id` (JSON-escaped) and its
    Content-Length (the last header, as http_pool.encode_request writes it) made to fit."""
    body_start = request.index(HEADER_END) + len(HEADER_END)
    body = request[body_start:].replace(PLACEHOLDER_JSON, orjson.dumps(response_id), 1)
    return with_body(request, body_start, body)
