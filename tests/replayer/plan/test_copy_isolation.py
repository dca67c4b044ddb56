"""Copies (--scale > 1) share no cache with the original and add no prompt token where the engine
takes `cache_salt`; the sim honours the salt as vLLM does."""

from __future__ import annotations

import json

import orjson

from llmreplay.sim.openai_request import parse_body
from llmreplay.sim.prompt_shape import prompt_shape
from llmreplay.tokenizers import load_tokenizer
from tests.replayer.plan.test_request_builder import body, record

MESSAGES = [{"role": "user", "content": "the same recorded question, word for word"}]


def test_a_copy_for_an_engine_with_cache_salt_keeps_the_recorded_text():
    rec = record(content_messages=json.dumps(MESSAGES), completion_tokens=5)
    _, original = body(rec, engine="vllm")
    _, copy = body(rec, engine="vllm", copy=1)
    assert "cache_salt" not in original
    assert copy["cache_salt"].startswith("llmreplay-copy-1-")
    assert copy["messages"] == original["messages"] == MESSAGES


def test_a_copy_for_an_engine_without_cache_salt_is_tagged_instead():
    rec = record(content_messages=json.dumps(MESSAGES), completion_tokens=5)
    _, copy = body(rec, engine="openai", copy=1)
    assert "cache_salt" not in copy
    assert copy["messages"][0]["content"].startswith("[copy 1:")


def _shape(salt: str | None):
    request = {"model": "m", "messages": [{"role": "user", "content": " lorem ipsum dolor" * 200}]}
    if salt is not None:
        request["cache_salt"] = salt
    return prompt_shape(load_tokenizer(), parse_body(orjson.dumps(request), "chat_completions"), 16, 0)


def test_the_sim_keeps_salted_prompts_apart_and_equal_salts_together():
    plain, salted, again, other = _shape(None), _shape("a"), _shape("a"), _shape("b")
    assert plain.prompt_tokens == salted.prompt_tokens
    assert salted.full_block_hashes == again.full_block_hashes
    assert not set(plain.full_block_hashes) & set(salted.full_block_hashes)
    assert not set(salted.full_block_hashes) & set(other.full_block_hashes)


def test_no_length_forcing_under_a_grammar_where_the_engine_fails_with_it():
    """llama.cpp answers 500 once a json_schema grammar completes under ignore_eos: only max_tokens."""
    schema = json.dumps({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}})
    rec = record(content_messages=json.dumps(MESSAGES), completion_tokens=5, content_response_format=schema)
    _, llama = body(rec, engine="llamacpp")
    _, vllm = body(rec, engine="vllm")
    assert llama["max_tokens"] == 5 and "ignore_eos" not in llama and "n_predict" not in llama
    assert vllm["ignore_eos"] is True and vllm["min_tokens"] == 5
    _, plain = body(record(content_messages=json.dumps(MESSAGES), completion_tokens=5), engine="llamacpp")
    assert plain["ignore_eos"] is True and plain["n_predict"] == 5
