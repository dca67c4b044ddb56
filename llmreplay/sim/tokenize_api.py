"""The sim's /tokenize and /detokenize, in vLLM's dialect: counts exactly as its usage does.

A chat `messages` body is counted by the sim's own prompt rendering (llmreplay.sim.prompt_shape),
so a client that fits prompts to this count gets the usage it fitted to. CPU-bound: off the loop.
"""

from __future__ import annotations

from llmreplay.sim.openai_request import InvalidRequest, json_object, parse_body
from llmreplay.sim.prompt_shape import prompt_token_ids
from llmreplay.tokenizers import Tokenizer


def tokenize(tokenizer: Tokenizer, raw: bytes, message_overhead_tokens: int) -> dict:
    """vLLM's TokenizeResponse for a `prompt` or a chat `messages` body."""
    body = json_object(raw)
    if "messages" in body:
        request = parse_body(raw, "chat_completions")
        ids = prompt_token_ids(tokenizer, request, message_overhead_tokens)
    elif isinstance(body.get("prompt"), str):
        ids = tokenizer.encode(body["prompt"])
    else:
        raise InvalidRequest("expected 'prompt' (a string) or 'messages'", param="prompt")
    answer = {"count": len(ids), "max_model_len": 0, "tokens": ids}
    if body.get("return_token_strs") is True:
        answer["token_strs"] = [tokenizer.decode([i]) for i in ids]
    return answer


def detokenize(tokenizer: Tokenizer, raw: bytes) -> dict:
    tokens = json_object(raw).get("tokens")
    if not isinstance(tokens, list) or not all(
        isinstance(t, int) and not isinstance(t, bool) for t in tokens
    ):
        raise InvalidRequest("'tokens' must be an array of integers", param="tokens")
    try:
        return {"prompt": tokenizer.decode(tokens)}
    except Exception:  # noqa: BLE001 (an id outside the vocabulary)
        raise InvalidRequest("'tokens' holds an id outside the vocabulary", param="tokens") from None
