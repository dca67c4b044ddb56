"""The responses the sim produced, for `previous_response_id`: id -> the conversation's token ids.

Bounded by total tokens (least recently used dropped first); ids are 4-byte ints in an array.
"""

from __future__ import annotations

from array import array
from collections import OrderedDict
from collections.abc import Iterable


class ResponseStore:
    """A chained turn's prompt = the stored conversation of the response it names + its new input."""

    __slots__ = ("capacity_tokens", "tokens", "_conversations")

    def __init__(self, capacity_tokens: int):
        self.capacity_tokens = capacity_tokens
        self.tokens = 0
        self._conversations: OrderedDict[str, array] = OrderedDict()

    def __len__(self) -> int:
        return len(self._conversations)

    def get(self, response_id: str) -> array | None:
        conversation = self._conversations.get(response_id)
        if conversation is not None:
            self._conversations.move_to_end(response_id)
        return conversation

    def put(self, response_id: str, token_ids: Iterable[int]) -> None:
        """Keep a response's conversation (prompt history, new input, output); one larger than the
        whole store is not kept."""
        conversation = array("i", token_ids)
        if len(conversation) > self.capacity_tokens:
            return
        self._conversations[response_id] = conversation
        self.tokens += len(conversation)
        while self.tokens > self.capacity_tokens:
            _, dropped = self._conversations.popitem(last=False)
            self.tokens -= len(dropped)
