"""The sim's API table: for each endpoint it answers, the body parser, the encoder of its answers and
its error body; the route is the endpoint's path (llmreplay.wire.endpoints). Adding an API the sim
answers is adding a row.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from llmreplay.sim.messages_request import parse_messages
from llmreplay.sim.messages_wire import MessagesEncoder, error_body
from llmreplay.sim.openai_request import CompletionRequest, InvalidRequest, parse_body
from llmreplay.sim.responses_request import parse_responses
from llmreplay.sim.responses_wire import ResponsesEncoder
from llmreplay.sim.sinks import Encoder
from llmreplay.sim.wire import ChatEncoder, CompletionEncoder, error_object

# (the parsed request, the model answering, its reasoning tokens, a fresh hex id, the chat reasoning field)
EncoderFactory = Callable[[CompletionRequest, str, int, str, str], Encoder]


@dataclass(frozen=True, slots=True)
class SimApi:
    parse: Callable[[bytes], CompletionRequest]  # InvalidRequest for a body the API refuses
    encoder: EncoderFactory
    error_body: Callable[[InvalidRequest], dict]  # an error in the API's own shape
    reasons: bool = True  # it has a reasoning channel (legacy completions has none)


def openai_error(exc: InvalidRequest) -> dict:
    kind = "server_error" if exc.status >= 500 else "invalid_request_error"
    if exc.status == 429:
        kind = "rate_limit_error"
    return error_object(str(exc), kind, exc.code, exc.param)


def _chat(parsed: CompletionRequest, model: str, reasoning: int, suffix: str, field: str) -> Encoder:
    call_id = f"call_{suffix[:24]}"
    return ChatEncoder(f"chatcmpl-{suffix}", int(time.time()), model, parsed.tool_name, call_id, reasoning, field)


def _completion(parsed: CompletionRequest, model: str, reasoning: int, suffix: str, field: str) -> Encoder:
    return CompletionEncoder(f"cmpl-{suffix}", int(time.time()), model)


def _responses(parsed: CompletionRequest, model: str, reasoning: int, suffix: str, field: str) -> Encoder:
    created = int(time.time())
    return ResponsesEncoder(f"resp_{suffix}", created, model, parsed.tool_name, suffix, reasoning, parsed.echo)


def _messages(parsed: CompletionRequest, model: str, reasoning: int, suffix: str, field: str) -> Encoder:
    return MessagesEncoder(f"msg_{suffix[:24]}", model, parsed.tool_name, f"toolu_{suffix[:24]}", reasoning)


SIM_APIS = {
    "chat_completions": SimApi(lambda raw: parse_body(raw, "chat_completions"), _chat, openai_error),
    "completions": SimApi(lambda raw: parse_body(raw, "completions"), _completion, openai_error, reasons=False),
    "responses": SimApi(parse_responses, _responses, openai_error),
    "messages": SimApi(parse_messages, _messages, lambda exc: error_body(str(exc), exc.status)),  # Anthropic's
}
