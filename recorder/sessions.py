"""Session inference: which earlier request a chat request continues, in bounded memory.

Rule: request B continues request A when B's messages start with A's messages followed by A's
answer (as an assistant message). Fed in completion order, which is the order clients see answers.
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

    def link_chat(
        self,
        request_id: str,
        messages: tuple[ChatMessage, ...],
        answer: ChatMessage | None,
        arrival_ns: int,
        end_ns: int,
    ) -> SessionLink:
        """Find the longest earlier (messages + answer) that prefixes `messages`; remember this turn."""
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
        if answer is not None:
            key = _chain(digest, answer)
            self._put(self._chats, key, _Turn(link.session_id, link.turn_index, request_id, end_ns))
        return link

    def _put(self, table: OrderedDict, key, turn: _Turn) -> None:
        table[key] = turn
        table.move_to_end(key)
        while len(table) > self.max_sessions:
            table.popitem(last=False)

    def __len__(self) -> int:
        return len(self._chats) + len(self._explicit)
