"""Session inference: which earlier request a request continues, in bounded memory.

Rule: request B continues request A when B's messages start with A's messages followed by A's
answer (as the API echoes it back: one or more assistant messages), or when B names A's stored
response (Responses `previous_response_id`, by a keyed hash of the id). Fed in completion order.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from dataclasses import dataclass

from recorder.request_shape import ChatMessage


@dataclass(frozen=True, slots=True)
class SessionLink:
    session_id: str
    turn_index: int = 0
    parent_request_id: str | None = None
    think_time_ns: int | None = None


@dataclass(frozen=True, slots=True)
class _Turn:
    session_id: str
    turn_index: int
    request_id: str
    end_ns: int


def _chain(previous: bytes, message: ChatMessage) -> bytes:
    text = f"{message.role}\x00{message.text}".encode("utf-8", "surrogatepass")
    return hashlib.blake2b(previous + text, digest_size=16).digest()


class SessionTracker:
    """LRU of the last turns seen, keyed by a chained digest of (messages + answer).

    Limits: a client that edits, trims or summarizes history, or reformats the answer it echoes back
    (other than content-as-parts vs string), starts a new session; an evicted turn does too.
    """

    def __init__(self, max_sessions: int):
        self.max_sessions = max_sessions
        self._chats: OrderedDict[bytes, _Turn] = OrderedDict()
        self._explicit: OrderedDict[str, _Turn] = OrderedDict()
        self._responses: OrderedDict[str, _Turn] = OrderedDict()  # keyed hash of a response id

    def link_explicit(self, session_id: str, request_id: str, arrival_ns: int, end_ns: int) -> SessionLink:
        """A session named by a header or the `user` field: turns counted in completion order."""
        previous = self._explicit.pop(session_id, None)
        link = SessionLink(session_id)
        if previous is not None:
            link = SessionLink(
                session_id, previous.turn_index + 1, previous.request_id, max(0, arrival_ns - previous.end_ns)
            )
        self._put(self._explicit, session_id, _Turn(session_id, link.turn_index, request_id, end_ns))
        return link

    def link_chained(self, request_id: str, state_key: str, arrival_ns: int) -> SessionLink:
        """A request continuing a stored response: the turn after the one that answered with it (a
        response never seen, or evicted, starts a session)."""
        parent = self._responses.get(state_key)
        if parent is None:
            return SessionLink(request_id)
        think_ns = max(0, arrival_ns - parent.end_ns)
        return SessionLink(parent.session_id, parent.turn_index + 1, parent.request_id, think_ns)

    def remember_response(self, response_key: str, link: SessionLink, request_id: str, end_ns: int) -> None:
        """The turn that answered with this response id (its keyed hash), for the requests naming it."""
        self._put(self._responses, response_key, _Turn(link.session_id, link.turn_index, request_id, end_ns))

    def link_chat(
        self,
        request_id: str,
        messages: tuple[ChatMessage, ...],
        answers: tuple[tuple[ChatMessage, ...], ...],
        arrival_ns: int,
        end_ns: int,
    ) -> SessionLink:
        """Find the longest earlier (messages + answer) that prefixes `messages`; remember this turn
        under each form its answer may come back in (`answers`)."""
        digest, parent = b"", None
        for message in messages:
            digest = _chain(digest, message)
            if message.role == "assistant":
                parent = self._chats.get(digest, parent)
        if parent is None:
            link = SessionLink(request_id)
        else:
            link = SessionLink(
                parent.session_id,
                parent.turn_index + 1,
                parent.request_id,
                max(0, arrival_ns - parent.end_ns),
            )
        for answer in answers:
            key = digest
            for message in answer:
                key = _chain(key, message)
            self._put(self._chats, key, _Turn(link.session_id, link.turn_index, request_id, end_ns))
        return link

    def _put(self, table: OrderedDict, key, turn: _Turn) -> None:
        table[key] = turn
        table.move_to_end(key)
        while len(table) > self.max_sessions:
            table.popitem(last=False)

    def __len__(self) -> int:
        return len(self._chats) + len(self._explicit) + len(self._responses)
