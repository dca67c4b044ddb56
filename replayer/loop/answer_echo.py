"""A turn that sends back the previous turn's answer sends staging's own answer, as a real client does:
the builder marks the echoed message's text, the loop splices in what staging answered (or, when that
turn failed, the marked text as built). Staging's cache then holds what the next turn reuses, as
production's did."""

from __future__ import annotations

import orjson

from llmreplay.openai_wire.response import summarize_json, summarize_stream
from llmreplay.sse import SSESplitter
from replayer.loop.request_file import HEADER_END

ANSWER_OPEN = "\x01llmreplay:previous-answer\x02"  # control characters: JSON escapes them, text never holds them
ANSWER_CLOSE = "\x03"
_OPEN = orjson.dumps(ANSWER_OPEN)[1:-1]  # as it stands in a JSON body
_CLOSE = orjson.dumps(ANSWER_CLOSE)[1:-1]
_LENGTH = b"\r\nContent-Length: "


def marked(text: str) -> str:
    """The echoed message's text as built, marked for the loop."""
    return ANSWER_OPEN + text + ANSWER_CLOSE


def echoes(request: bytes) -> bool:
    return request.find(_OPEN) >= 0


def answer_text(parts: list[bytes], streamed: bool) -> str | None:
    """The answer text of choice 0 in a response's body (SSE reads or a JSON body), by the wire rules;
    None when there is none to send back."""
    if not streamed:
        try:
            return summarize_json(b"".join(parts), "chat_completions").text or None
        except ValueError:
            return None
    splitter, events = SSESplitter(), []
    for part in parts:
        events.extend((0, payload) for payload in splitter.feed(part))
    events.extend((0, payload) for payload in splitter.finish())
    return summarize_stream(events).text or None


def with_answer(request: bytes, answer: str | None) -> bytes:
    """The request with its marked text replaced by `answer` (None: by the text as built, unmarked)
    and Content-Length (the last header, as http_pool.encode_request writes it) made to fit."""
    body_start = request.index(HEADER_END) + len(HEADER_END)
    start = request.find(_OPEN, body_start)
    end = request.find(_CLOSE, start + len(_OPEN))
    if start < 0 or end < 0:
        return request
    spliced = request[start + len(_OPEN) : end] if answer is None else orjson.dumps(answer)[1:-1]
    body = b"%s%s%s" % (request[body_start:start], spliced, request[end + len(_CLOSE) :])
    return with_body(request, body_start, body)


def with_body(request: bytes, body_start: int, body: bytes) -> bytes:
    """`request` with a new body and its Content-Length header made to fit."""
    length_at = request.rindex(_LENGTH, 0, body_start)
    return b"%s%s%d%s%s" % (request[:length_at], _LENGTH, len(body), HEADER_END, body)
