"""Synthesized prompts fitted to a target's own count, template and tools included.

The target here is a real tokenizer (Tekken) behind a real chat template (ChatML whose messages
are trimmed, as Llama-3's template trims them): the count the fitter must hit is the template's.
"""

from __future__ import annotations

import json

import orjson
import pytest

from llmreplay.tokenizers import load_tokenizer
from llmreplay.trace_format import MessageShape
from replayer.plan.prompt_fit import PromptFitter
from replayer.plan.prompt_synthesis import BlockSpeller, ExactTextWords
from replayer.plan.request_builder import BuildOptions, build_request
from tests.replayer.plan.test_request_builder import plan_for, record


class TrimmingChatML:
    """count_chat as an engine renders it: system preamble, trimmed contents, tools as JSON."""

    id = "chatml-trimmed"

    def __init__(self, trim: bool = True):
        self.tokenizer = load_tokenizer()
        self.trim = trim

    def render(self, messages, tools=None) -> str:
        out = "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
        if tools:
            out += "<|im_start|>tools\n" + json.dumps(tools) + "<|im_end|>\n"
        for m in messages:
            content = m["content"].strip() if self.trim else m["content"]
            out += f"<|im_start|>{m['role']}\n{content}<|im_end|>\n"
        return out + "<|im_start|>assistant\n"

    def count_chat(self, messages, tools=None) -> int:
        return self.tokenizer.count(self.render(messages, tools))

    def count_prompt(self, text: str) -> int:
        return self.tokenizer.count(text) + 1  # a BOS


@pytest.fixture(scope="module")
def speller():
    return BlockSpeller(ExactTextWords(None), block_size=16)


def _built(rec, speller, fitter):
    plan = plan_for(rec)[0]
    built = build_request(
        rec, plan, BuildOptions(engine="openai", model=None, default_model="m"), speller, fitter
    )
    return orjson.loads(built.body)


LAYOUTS = [
    [MessageShape("user", 300)],
    [MessageShape("system", 40), MessageShape("user", 120)],
    [MessageShape("user", 50), MessageShape("assistant", 80), MessageShape("user", 33)],
]


@pytest.mark.parametrize("shapes", LAYOUTS)
@pytest.mark.parametrize("prompt_tokens", [90, 257, 1000])
def test_the_target_counts_the_recorded_length(speller, shapes, prompt_tokens):
    counter = TrimmingChatML()
    fitter = PromptFitter(counter)
    rec = record(messages=shapes, prompt_tokens=prompt_tokens, completion_tokens=4)
    body = _built(rec, speller, fitter)
    assert counter.count_chat(body["messages"], body.get("tools")) == prompt_tokens
    assert fitter.stats.exact == 1 and fitter.stats.off == 0


def test_tools_count_toward_the_fitted_length(speller):
    counter = TrimmingChatML()
    rec = record(prompt_tokens=600, tools_count=2, tool_definition_tokens=200, completion_tokens=4)
    body = _built(rec, speller, PromptFitter(counter))
    assert len(body["tools"]) == 2
    assert counter.count_chat(body["messages"], body["tools"]) == 600


@pytest.mark.parametrize("trim", [False, True])
def test_a_layout_correction_is_remembered_then_trusted_on_samples(speller, trim):
    counter = TrimmingChatML(trim)
    fitter = PromptFitter(counter)
    bodies = [
        _built(record(request_id=f"r{i}", prompt_tokens=400 + i, completion_tokens=4), speller, fitter)
        for i in range(120)
    ]
    stats = fitter.stats
    assert stats.off == 0 and stats.exact + stats.trusted == 120
    if trim:  # the trimmed first word's length varies: the layout never earns trust, every prompt is counted
        assert stats.trusted == 0
    else:
        assert stats.trusted > 70 and stats.calls < 50
    assert all(counter.count_chat(b["messages"]) == 400 + i for i, b in enumerate(bodies))


def test_a_prompt_shorter_than_the_template_is_off_and_counted_so(speller):
    counter = TrimmingChatML()
    fitter = PromptFitter(counter)
    body = _built(record(prompt_tokens=5, completion_tokens=4), speller, fitter)
    assert fitter.stats.off == 1 and fitter.stats.worst_off > 0
    assert counter.count_chat(body["messages"]) > 5


def test_completions_prompts_are_fitted_too(speller):
    counter = TrimmingChatML()
    rec = record(endpoint="completions", prompt_tokens=222, completion_tokens=4)
    body = _built(rec, speller, PromptFitter(counter))
    assert counter.count_prompt(body["prompt"]) == 222


def test_recorded_content_is_measured_not_changed(speller):
    counter = TrimmingChatML()
    fitter = PromptFitter(counter)
    messages = [{"role": "user", "content": "what is the capital of France?"}]
    rec = record(content_messages=json.dumps(messages), prompt_tokens=10, completion_tokens=4)
    body = _built(rec, speller, fitter)
    assert body["messages"] == messages
    summary = fitter.stats.as_dict()["content"]
    assert summary["requests"] == 1 and summary["exact_share"] == 0.0
    assert summary["relative_error_p50"] > 0  # the template's tokens: longer than recorded


def test_fit_lengths_respells_content_from_its_shape(speller):
    counter = TrimmingChatML()
    messages = [{"role": "user", "content": "what is the capital of France?"}]
    rec = record(
        content_messages=json.dumps(messages),
        messages=[MessageShape("user", 8)],
        prompt_tokens=90,
        completion_tokens=4,
    )
    plan = plan_for(rec)[0]
    options = BuildOptions(engine="openai", model=None, default_model="m", fit_lengths=True)
    body = orjson.loads(build_request(rec, plan, options, speller, PromptFitter(counter)).body)
    assert body["messages"] != messages
    assert counter.count_chat(body["messages"]) == 90
