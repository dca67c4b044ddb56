"""OpenAI Responses API wire format for the sim's answers: `event:`-named SSE events and the body.

Every event carries a `sequence_number`, so a token's event is built per token (a few byte joins).
Reasoning streams first as a `reasoning` item (response.reasoning_text.delta), then the answer item.
"""

from __future__ import annotations

import orjson

from llmreplay.sim.wire import _WORDS_JSON, answer_text, chunk_frame, tool_argument_fragments

# finish reason (the sim's chat vocabulary) -> (response status, incomplete_details)
_STATUS = {
    "stop": ("completed", None),
    "tool_calls": ("completed", None),
    "length": ("incomplete", {"reason": "max_output_tokens"}),
}


def responses_usage(chat_usage: dict) -> dict:
    """The Responses usage object of the sim's chat-shaped usage (llmreplay.sim.wire.usage)."""
    details = chat_usage.get("completion_tokens_details") or {}
    return {
        "input_tokens": chat_usage["prompt_tokens"],
        "input_tokens_details": {"cached_tokens": chat_usage["prompt_tokens_details"]["cached_tokens"]},
        "output_tokens": chat_usage["completion_tokens"],
        "output_tokens_details": {"reasoning_tokens": details.get("reasoning_tokens", 0)},
        "total_tokens": chat_usage["total_tokens"],
    }


def event(name: str, sequence_number: int, fields: dict) -> bytes:
    data = {"type": name, "sequence_number": sequence_number, **fields}
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


class ResponsesEncoder:
    """The events of one `response` (created, items, deltas, completed/incomplete) and its body."""

    def __init__(
        self,
        response_id: str,
        created_s: int,
        model: str,
        tool_name: str | None,
        item_suffix: str,
        reasoning_tokens: int,
        echo: dict,
    ):
        self.response_id, self._created, self._model = response_id, created_s, model
        self._tool_name = tool_name
        self.reasoning_tokens = reasoning_tokens
        self._echo = echo  # request fields a Response repeats: tools, tool_choice, max_output_tokens, ...
        self._reasoning_id, self._answer_id = f"rs_{item_suffix}", f"msg_{item_suffix}"
        if tool_name is not None:
            self._answer_id = f"fc_{item_suffix}"
        self._call_id = f"call_{item_suffix[:24]}"
        self._seq = 0
        self._fragments: list[str] | None = None
        self._delta_head: bytes | None = None
        self._delta_tail = b""

    # -- stream ----------------------------------------------------------------------------

    def opening(self) -> bytes:
        shell = self._response("in_progress", [], None)
        opening = self._event("response.created", {"response": shell})
        opening += self._event("response.in_progress", {"response": shell})
        return opening + self._open_item(0, self.reasoning_tokens > 0)

    def start(self, prompt_tokens: int, cached_tokens: int) -> bytes:
        return b""  # response.created went with the headers; usage comes at the end

    def token_frame(self, number: int, target_tokens: int) -> bytes:
        return chunk_frame(self.token(number, target_tokens))

    def token(self, number: int, target_tokens: int) -> bytes:
        """The events of token `number` (1-based) of `target_tokens`: a delta, after the reasoning
        item's closing events when it is the answer's first token."""
        prefix = b""
        if number == self.reasoning_tokens + 1 and self.reasoning_tokens:
            prefix = self._close_item(0, self.reasoning_tokens, True, "completed") + self._open_item(1, False)
        if number <= self.reasoning_tokens:
            delta = _WORDS_JSON[(number - 1) % len(_WORDS_JSON)]
        elif self._tool_name is None:
            delta = _WORDS_JSON[(number - self.reasoning_tokens - 1) % len(_WORDS_JSON)]
        else:
            if self._fragments is None:
                self._fragments = tool_argument_fragments(target_tokens - self.reasoning_tokens)
            delta = orjson.dumps(self._fragments[number - self.reasoning_tokens - 1])
        self._seq += 1
        return prefix + self._delta_head + str(self._seq).encode() + b',"delta":' + delta + self._delta_tail

    def closing(self, finish_reason: str, usage_obj: dict) -> bytes:
        """The answer item's closing events and response.completed (or .incomplete at max_output_tokens);
        the usage (always sent) says how many tokens were generated."""
        tokens = usage_obj["completion_tokens"]
        status, _ = _STATUS[finish_reason]
        answer = tokens - min(self.reasoning_tokens, tokens)
        index = 1 if self.reasoning_tokens else 0
        closing = self._close_item(index, answer, False, status) if answer else b""
        final = self._response(status, self._output(tokens, status), usage_obj, finish_reason)
        return closing + self._event(f"response.{status}", {"response": final})

    def stream_error(self) -> bytes:
        """An `error` event, as OpenAI sends one for a failure inside the stream."""
        fields = {"code": "server_error", "message": "simulated error inside the stream", "param": None}
        return self._event("error", fields)

    # -- body ------------------------------------------------------------------------------

    def body(self, tokens: int, finish_reason: str, usage_obj: dict) -> dict:
        status, _ = _STATUS[finish_reason]
        return self._response(status, self._output(tokens, status), usage_obj, finish_reason)

    # -- pieces ----------------------------------------------------------------------------

    def _event(self, name: str, fields: dict) -> bytes:
        self._seq += 1
        return event(name, self._seq, fields)

    def _open_item(self, index: int, reasoning: bool) -> bytes:
        item_id = self._reasoning_id if reasoning else self._answer_id
        opening = self._event(
            "response.output_item.added",
            {"output_index": index, "item": self._item(reasoning, "", "in_progress")},
        )
        where = {"item_id": item_id, "output_index": index}
        if reasoning or self._tool_name is None:
            part = {"type": "reasoning_text", "text": ""} if reasoning else _output_text("")
            opening += self._event("response.content_part.added", {**where, "content_index": 0, "part": part})
        self._delta_tail = b"}\n\n"
        if reasoning:
            kind, where = "response.reasoning_text.delta", {**where, "content_index": 0}
        elif self._tool_name is None:
            kind, where = "response.output_text.delta", {**where, "content_index": 0}
            self._delta_tail = b',"logprobs":[]}\n\n'
        else:
            kind = "response.function_call_arguments.delta"
        head = {"type": kind, **where}
        self._delta_head = (
            b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(head)[:-1] + b',"sequence_number":'
        )
        return opening

    def _close_item(self, index: int, tokens: int, reasoning: bool, status: str) -> bytes:
        item_id = self._reasoning_id if reasoning else self._answer_id
        text = self._item_text(reasoning, tokens)
        where = {"item_id": item_id, "output_index": index}
        if reasoning:
            closing = self._event("response.reasoning_text.done", {**where, "content_index": 0, "text": text})
            part = {"type": "reasoning_text", "text": text}
            closing += self._event("response.content_part.done", {**where, "content_index": 0, "part": part})
        elif self._tool_name is None:
            closing = self._event(
                "response.output_text.done", {**where, "content_index": 0, "text": text, "logprobs": []}
            )
            closing += self._event(
                "response.content_part.done", {**where, "content_index": 0, "part": _output_text(text)}
            )
        else:
            closing = self._event("response.function_call_arguments.done", {**where, "arguments": text})
        item = self._item(reasoning, text, "completed" if reasoning else status)
        return closing + self._event("response.output_item.done", {"output_index": index, "item": item})

    def _item_text(self, reasoning: bool, tokens: int) -> str:
        if reasoning or self._tool_name is None:
            return answer_text(tokens)
        return "".join(tool_argument_fragments(tokens))

    def _item(self, reasoning: bool, text: str, status: str) -> dict:
        if reasoning:
            content = [{"type": "reasoning_text", "text": text}] if text else []
            return {
                "id": self._reasoning_id,
                "type": "reasoning",
                "summary": [],
                "content": content,
                "status": status,
            }
        if self._tool_name is not None:
            return {
                "id": self._answer_id, "type": "function_call", "call_id": self._call_id,
                "name": self._tool_name, "arguments": text, "status": status,
            }  # fmt: skip
        content = [_output_text(text)] if text or status != "in_progress" else []
        return {
            "id": self._answer_id,
            "type": "message",
            "role": "assistant",
            "status": status,
            "content": content,
        }

    def _output(self, tokens: int, status: str) -> list[dict]:
        reasoning = min(self.reasoning_tokens, tokens)
        output = [self._item(True, answer_text(reasoning), "completed")] if reasoning else []
        if tokens > reasoning:
            output.append(self._item(False, self._item_text(False, tokens - reasoning), status))
        return output

    def _response(
        self, status: str, output: list, usage_obj: dict | None, finish_reason: str | None = None
    ) -> dict:
        incomplete = _STATUS[finish_reason][1] if finish_reason else None
        return {
            "id": self.response_id, "object": "response", "created_at": self._created, "model": self._model,
            "status": status, "output": output, "error": None, "incomplete_details": incomplete,
            "parallel_tool_calls": True, "temperature": 1.0, "top_p": 1.0, "metadata": {},
            **self._echo, "usage": responses_usage(usage_obj) if usage_obj is not None else None,
        }  # fmt: skip


def _output_text(text: str) -> dict:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
