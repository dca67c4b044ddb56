"""One parser of --tokenizer values (llmreplay.tokenizers.parse_tokenizer_spec): what load_tokenizer
loads and what the recorder's proxy accepts without loading it."""

from __future__ import annotations

from dataclasses import replace

import pytest

from llmreplay.errors import BadInput
from llmreplay.tokenizers import DEFAULT_TOKENIZER, parse_tokenizer_spec
from recorder.config import RecorderConfig

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
