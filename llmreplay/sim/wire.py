"""OpenAI wire format for the sim's answers: pre-encoded SSE chunk bytes and whole bodies.

Per request, the constant JSON around a token is encoded once; a token's chunk is then a
byte concatenation. Token text comes from a fixed vocabulary of single-token words. A reasoning
answer streams its first tokens as reasoning deltas (llmreplay.wire.channels names the keys).
"""

from __future__ import annotations

import orjson

# Each word is one token for Tekken, tiktoken cl100k and most BPE vocabularies.
VOCABULARY = (
    " the", " of", " and", " to", " a", " in", " is", " it", " that", " for", " on", " with",
    " as", " was", " be", " at", " by", " this", " from", " or", " we", " can", " more", " one",
)  # fmt: skip
_WORDS_JSON = tuple(orjson.dumps(word) for word in VOCABULARY)
_DONE = b"data: [DONE]\n\n"
_STREAM_ERROR = (
    b"data: "
    + orjson.dumps(
        {"error": {"message": "simulated error inside the stream", "type": "server_error", "param": None,
                   "code": "simulated_stream_error"}}
    )
    + b"\n\n"
    + _DONE
)  # fmt: skip
_NO_FINISH = b',"logprobs":null,"finish_reason":null}]}\n\n'


def chunk_frame(payload: bytes) -> bytes:
    """One HTTP/1.1 chunked-encoding frame (the sim writes SSE straight to the transport)."""
    return b"%x\r\n%b\r\n" % (len(payload), payload)


def word(index: int) -> str:
    return VOCABULARY[index % len(VOCABULARY)]


def answer_text(tokens: int) -> str:
    return "".join(word(i) for i in range(tokens))


def tool_argument_fragments(tokens: int) -> list[str]:
    """The arguments JSON split into `tokens` pieces; it is valid JSON once all have arrived."""
    if tokens == 1:
        return ["{}"]
    return ['{"input": "', *(word(i) for i in range(tokens - 2)), '"}']


def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int, reasoning_tokens: int = 0) -> dict:
    """`completion_tokens` counts reasoning too; its reasoning share is reported when there is one."""
    obj = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached_tokens},
    }
    if reasoning_tokens:
        obj["completion_tokens_details"] = {"reasoning_tokens": reasoning_tokens}
    return obj


def sse(obj: dict) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


def error_object(message: str, kind: str, code: str | None, param: str | None = None) -> dict:
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


class ChatEncoder:
    """`chat.completion.chunk` events and the `chat.completion` body for one request."""

    def __init__(
        self,
        completion_id: str,
        created_s: int,
        model: str,
        tool_name: str | None,
        tool_call_id: str,
        reasoning_tokens: int = 0,
        reasoning_field: str = "reasoning",
    ):
        self._id, self._created, self._model = completion_id, created_s, model
        self._tool_name, self._tool_call_id = tool_name, tool_call_id
        self.reasoning_tokens = reasoning_tokens  # the first tokens, sent under `reasoning_field`
        self._reasoning_key = orjson.dumps(reasoning_field)
        self._reasoning_field = reasoning_field
        self._head = (
            b'data: {"id":' + orjson.dumps(completion_id) + b',"object":"chat.completion.chunk","created":'
            + str(created_s).encode() + b',"model":' + orjson.dumps(model) + b',"choices":[{"index":0,"delta":'
        )  # fmt: skip
        self._fragments: list[str] | None = None
        self._word_frames: tuple[bytes, ...] | None = None
        self._reasoning_frames: tuple[bytes, ...] | None = None

    def opening(self) -> bytes:
        return self._head + b'{"role":"assistant","content":""}' + _NO_FINISH

    def start(self, prompt_tokens: int, cached_tokens: int) -> bytes:
        return b""  # nothing before the first token (its prompt usage comes with the last)

    def stream_error(self) -> bytes:
        return _STREAM_ERROR

    def token_frame(self, number: int, target_tokens: int) -> bytes:
        """`token` as a chunked-encoding frame; text tokens are framed once per request and word."""
        if number <= self.reasoning_tokens:
            if self._reasoning_frames is None:
                self._reasoning_frames = tuple(chunk_frame(self._reasoning_event(w)) for w in _WORDS_JSON)
            return self._reasoning_frames[(number - 1) % len(_WORDS_JSON)]
        if self._tool_name is not None:
            return chunk_frame(self.token(number, target_tokens))
        if self._word_frames is None:
            self._word_frames = tuple(
                chunk_frame(self._head + b'{"content":' + word_json + b"}" + _NO_FINISH)
                for word_json in _WORDS_JSON
            )
        return self._word_frames[(number - 1) % len(_WORDS_JSON)]

    def token(self, number: int, target_tokens: int) -> bytes:
        """The event for token `number` (1-based) of `target_tokens`, reasoning included."""
        if number <= self.reasoning_tokens:
            return self._reasoning_event(_WORDS_JSON[(number - 1) % len(_WORDS_JSON)])
        if self._tool_name is None:
            return (
                self._head + b'{"content":' + _WORDS_JSON[(number - 1) % len(_WORDS_JSON)] + b"}" + _NO_FINISH
            )
        number -= self.reasoning_tokens
        if self._fragments is None:
            self._fragments = tool_argument_fragments(target_tokens - self.reasoning_tokens)
        arguments = orjson.dumps(self._fragments[number - 1])
        if number == 1:
            call = (
                b'{"index":0,"id":' + orjson.dumps(self._tool_call_id) + b',"type":"function","function":{"name":'
                + orjson.dumps(self._tool_name) + b',"arguments":' + arguments + b"}}"
            )  # fmt: skip
        else:
            call = b'{"index":0,"function":{"arguments":' + arguments + b"}}"
        return self._head + b'{"tool_calls":[' + call + b"]}" + _NO_FINISH

    def closing(self, finish_reason: str, usage_obj: dict | None) -> bytes:
        final = self._head + b'{},"logprobs":null,"finish_reason":' + orjson.dumps(finish_reason) + b"}]}\n\n"
        if usage_obj is not None:
            final += sse(self._envelope("chat.completion.chunk", [], usage_obj))
        return final + _DONE

    def _reasoning_event(self, word_json: bytes) -> bytes:
        return self._head + b"{" + self._reasoning_key + b":" + word_json + b"}" + _NO_FINISH

    def body(self, tokens: int, finish_reason: str, usage_obj: dict) -> dict:
        reasoning = min(self.reasoning_tokens, tokens)
        answer = tokens - reasoning
        if self._tool_name is None:
            message = {"role": "assistant", "content": answer_text(answer)}
        else:
            call = {
                "id": self._tool_call_id,
                "type": "function",
                "function": {"name": self._tool_name, "arguments": "".join(tool_argument_fragments(answer))},
            }
            message = {"role": "assistant", "content": None, "tool_calls": [call]}
        if reasoning:
            message[self._reasoning_field] = answer_text(reasoning)
        choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason}
        return self._envelope("chat.completion", [choice], usage_obj)

    def _envelope(self, kind: str, choices: list, usage_obj: dict | None) -> dict:
        obj = {
            "id": self._id,
            "object": kind,
            "created": self._created,
            "model": self._model,
            "choices": choices,
        }
        if usage_obj is not None:
            obj["usage"] = usage_obj
        return obj


class CompletionEncoder:
    """`text_completion` events and body (legacy /v1/completions)."""

    def __init__(self, completion_id: str, created_s: int, model: str):
        self._id, self._created, self._model = completion_id, created_s, model
        self._head = (
            b'data: {"id":' + orjson.dumps(completion_id) + b',"object":"text_completion","created":'
            + str(created_s).encode() + b',"model":' + orjson.dumps(model) + b',"choices":[{"index":0,"text":'
        )  # fmt: skip
        self._word_frames: tuple[bytes, ...] | None = None

    def opening(self) -> bytes:
        return b""

    def start(self, prompt_tokens: int, cached_tokens: int) -> bytes:
        return b""

    def stream_error(self) -> bytes:
        return _STREAM_ERROR

    def token_frame(self, number: int, target_tokens: int) -> bytes:
        if self._word_frames is None:
            self._word_frames = tuple(
                chunk_frame(self._head + word_json + _NO_FINISH) for word_json in _WORDS_JSON
            )
        return self._word_frames[(number - 1) % len(_WORDS_JSON)]

    def token(self, number: int, target_tokens: int) -> bytes:
        return self._head + _WORDS_JSON[(number - 1) % len(_WORDS_JSON)] + _NO_FINISH

    def closing(self, finish_reason: str, usage_obj: dict | None) -> bytes:
        final = self._head + b'"","logprobs":null,"finish_reason":' + orjson.dumps(finish_reason) + b"}]}\n\n"
        if usage_obj is not None:
            final += sse(self._envelope([], usage_obj))
        return final + _DONE

    def body(self, tokens: int, finish_reason: str, usage_obj: dict) -> dict:
        choice = {"index": 0, "text": answer_text(tokens), "logprobs": None, "finish_reason": finish_reason}
        return self._envelope([choice], usage_obj)

    def _envelope(self, choices: list, usage_obj: dict | None) -> dict:
        obj = {"id": self._id, "object": "text_completion", "created": self._created, "model": self._model}
        obj["choices"] = choices
        if usage_obj is not None:
            obj["usage"] = usage_obj
        return obj
