"""A turn that sends back earlier turns' answers sends staging's own answers, as a real client does:
the builder marks each echoed answer's text with how many turns back it was given, the loop splices in
what staging answered then (or, when that turn failed, the marked text as built). Staging's cache then
holds what the next turn reuses, as production's did."""

from __future__ import annotations

import re

import orjson

from llmreplay.sse import SSESplitter
from llmreplay.wire.response import summarize_json, summarize_stream
from replayer.loop.http_pool import with_new_body

# Control characters: JSON escapes them, so they cannot come from text; "\x01...:<turns back>\x02 text \x03".
ECHO_DIALECT = "chat"  # the dialect whose answers a next turn may echo (Chat Completions)
ANSWER_OPEN = "\x01llmreplay:answer:"
ANSWER_CLOSE = "\x03"
_OPEN = orjson.dumps(ANSWER_OPEN)[1:-1]  # as it stands in a JSON body
_MARK = re.compile(re.escape(_OPEN) + rb"(\d{1,6})\\u0002(.*?)\\u0003", re.DOTALL)
_TEXT_MARK = re.compile(re.escape(ANSWER_OPEN) + r"(\d{1,6})\x02")

Answers = list  # [str | None]: the session's earlier answers as staging gave them, the latest first


def marked(text: str, back: int = 1) -> str:
    """The text of an answer given `back` turns before the request, as built, marked for the loop."""
    return f"{ANSWER_OPEN}{back}\x02{text}{ANSWER_CLOSE}"


def one_turn_later(text: str) -> str:
    """Text holding marks, as the next turn sends it: each answer one more turn back."""
    return _TEXT_MARK.sub(lambda m: f"{ANSWER_OPEN}{int(m.group(1)) + 1}\x02", text)


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


def with_answers(request: bytes, answers: Answers) -> bytes:
    """The request with each marked text replaced by staging's answer of that turn (its text as built
    when that turn failed or is not known)."""

    def splice(match: re.Match) -> bytes:
        back = int(match.group(1))
        answer = answers[back - 1] if 0 < back <= len(answers) else None
        return match.group(2) if answer is None else orjson.dumps(answer)[1:-1]

    return with_new_body(request, lambda body: _MARK.sub(splice, body))
