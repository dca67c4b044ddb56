"""Anthropic Messages API wire format for the sim's answers: `event:`-named SSE events and the body.

Reasoning streams first as a `thinking` block (thinking_delta, then one signature_delta), then a
`text` or `tool_use` block. Usage: input_tokens excludes the prompt tokens read from the prefix cache.
"""

from __future__ import annotations

import hashlib

import orjson

from llmreplay.sim.wire import _WORDS_JSON, answer_text, chunk_frame, tool_argument_fragments
from llmreplay.sim.wire import usage as chat_usage

STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}
# HTTP status -> Anthropic's error type (https://docs.anthropic.com/en/api/errors)
ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
               404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error",
               503: "overloaded_error", 529: "overloaded_error"}  # fmt: skip


def error_body(message: str, status: int) -> dict:
    """Anthropic's error shape: {"type": "error", "error": {"type", "message"}}."""
    kind = ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    return {"type": "error", "error": {"type": kind, "message": message}}


def messages_usage(chat_usage: dict) -> dict:
    """Anthropic's usage of the sim's chat-shaped usage: cached prompt tokens are cache reads."""
    cached = chat_usage["prompt_tokens_details"]["cached_tokens"]
    return {
        "input_tokens": chat_usage["prompt_tokens"] - cached,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": cached,
        "output_tokens": chat_usage["completion_tokens"],
    }


def event(name: str, fields: dict) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps({"type": name, **fields}) + b"\n\n"


def signature(text: str) -> str:
    """A thinking block's signature: opaque to clients, here a digest of the thinking text."""
    return hashlib.blake2b(text.encode(), digest_size=24).hexdigest()


class MessagesEncoder:
    """The events of one `message` (message_start, content blocks, message_delta, message_stop) and its body."""

    def __init__(
        self,
        message_id: str,
        model: str,
        tool_name: str | None,
        tool_use_id: str,
        reasoning_tokens: int,
    ):
        self._id, self._model = message_id, model
        self._tool_name, self._tool_use_id = tool_name, tool_use_id
        self.reasoning_tokens = reasoning_tokens
        self._fragments: list[str] | None = None
        self._heads: dict[str, bytes] = {}

    # -- stream ----------------------------------------------------------------------------

    def opening(self) -> bytes:
        return b""  # message_start carries the cache reads, known at admission: sent with the first token

    def start(self, prompt_tokens: int, cached_tokens: int) -> bytes:
        """message_start (with the prompt's usage, known once admitted) and the first block's start."""
        usage = messages_usage(chat_usage(prompt_tokens, 0, cached_tokens))
        message = self._message([], None, usage)
        return event("message_start", {"message": message}) + self._open_block(0, self.reasoning_tokens > 0)

    def token_frame(self, number: int, target_tokens: int) -> bytes:
        return chunk_frame(self.token(number, target_tokens))

    def token(self, number: int, target_tokens: int) -> bytes:
        """The events of token `number` (1-based): a delta, after the thinking block's signature and
        stop when it is the answer's first token."""
        prefix = b""
        reasoning = self.reasoning_tokens
        if number == reasoning + 1 and reasoning:
            prefix = self._close_thinking(reasoning) + self._open_block(1, False)
        if number <= reasoning:
            return prefix + self._delta(
                "thinking_delta", "thinking", 0, _WORDS_JSON[(number - 1) % len(_WORDS_JSON)]
            )
        index = 1 if reasoning else 0
        if self._tool_name is None:
            word_json = _WORDS_JSON[(number - reasoning - 1) % len(_WORDS_JSON)]
            return prefix + self._delta("text_delta", "text", index, word_json)
        if self._fragments is None:
            self._fragments = tool_argument_fragments(target_tokens - reasoning)
        fragment = orjson.dumps(self._fragments[number - reasoning - 1])
        return prefix + self._delta("input_json_delta", "partial_json", index, fragment)

    def closing(self, finish_reason: str, usage_obj: dict) -> bytes:
        """The open block's stop, message_delta (stop_reason, cumulative usage) and message_stop."""
        tokens = usage_obj["completion_tokens"]
        index = 1 if self.reasoning_tokens else 0
        closing = (
            self._close_thinking(tokens)
            if tokens <= self.reasoning_tokens
            else event("content_block_stop", {"index": index})
        )
        delta = {"stop_reason": STOP_REASONS[finish_reason], "stop_sequence": None}
        closing += event("message_delta", {"delta": delta, "usage": messages_usage(usage_obj)})
        return closing + event("message_stop", {})

    def stream_error(self) -> bytes:
        """An `event: error`, as Anthropic sends one for a failure inside the stream."""
        return event(
            "error", {"error": {"type": "api_error", "message": "simulated error inside the stream"}}
        )

    # -- body ------------------------------------------------------------------------------

    def body(self, tokens: int, finish_reason: str, usage_obj: dict) -> dict:
        reasoning = min(self.reasoning_tokens, tokens)
        content = []
        if reasoning:
            thinking = answer_text(reasoning)
            content.append({"type": "thinking", "thinking": thinking, "signature": signature(thinking)})
        if tokens > reasoning:
            content.append(self._answer_block(tokens - reasoning))
        return self._message(content, STOP_REASONS[finish_reason], messages_usage(usage_obj))

    # -- pieces ----------------------------------------------------------------------------

    def _answer_block(self, tokens: int) -> dict:
        if self._tool_name is None:
            return {"type": "text", "text": answer_text(tokens)}
        arguments = orjson.loads("".join(tool_argument_fragments(tokens)))
        return {"type": "tool_use", "id": self._tool_use_id, "name": self._tool_name, "input": arguments}

    def _open_block(self, index: int, thinking: bool) -> bytes:
        if thinking:
            block = {"type": "thinking", "thinking": "", "signature": ""}
        elif self._tool_name is None:
            block = {"type": "text", "text": ""}
        else:
            block = {"type": "tool_use", "id": self._tool_use_id, "name": self._tool_name, "input": {}}
        return event("content_block_start", {"index": index, "content_block": block})

    def _close_thinking(self, tokens: int) -> bytes:
        sign = {"type": "signature_delta", "signature": signature(answer_text(tokens))}
        return event("content_block_delta", {"index": 0, "delta": sign}) + event(
            "content_block_stop", {"index": 0}
        )

    def _delta(self, kind: str, key: str, index: int, value_json: bytes) -> bytes:
        head = self._heads.get(kind)
        if head is None:
            head = b'event: content_block_delta\ndata: {"type":"content_block_delta","index":%d,"delta":{"type":"%s","%s":' % (
                index, kind.encode(), key.encode(),
            )  # fmt: skip
            self._heads[kind] = head
        return head + value_json + b"}}\n\n"

    def _message(self, content: list, stop_reason: str | None, usage: dict) -> dict:
        return {
            "id": self._id, "type": "message", "role": "assistant", "model": self._model, "content": content,
            "stop_reason": stop_reason, "stop_sequence": None, "usage": usage,
        }  # fmt: skip
