"""Tokenizers of the families users serve, trained here from a seeded corpus (no model hub).

A byte-level BPE (GPT-2/Llama-3 style) and a SentencePiece-style BPE (Metaspace, byte fallback:
Llama-2, Mistral v0.1, Phi-3), both 32k. The corpus is made of seeded pseudo-words, so the learnt
vocabulary is mostly word pieces, not the Faker words the exact-text generator prefers.
"""

from __future__ import annotations

import itertools
import random
from pathlib import Path

VOCAB_SIZE = 32_000
_SYLLABLES = [c + v for c in "bcdfghjklmnprstvwz" for v in "aeiou"] + ["th", "sh", "qu", "str"]


def _corpus(seed: int = 7, lines: int = 12_000) -> list[str]:
    rng = random.Random(seed)
    words = ["".join(rng.choices(_SYLLABLES, k=rng.randint(1, 4))) for _ in range(60_000)]
    zipf = list(
        itertools.accumulate(1 / (rank + 1) for rank in range(len(words)))
    )  # frequent words become tokens
    return [" ".join(rng.choices(words, cum_weights=zipf, k=24)) + "." for _ in range(lines)]


def byte_level_bpe(directory: Path) -> Path:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tokenizer.train_from_iterator(_corpus(), trainer)
    return _save(tokenizer, directory / "byte-level-bpe-32k.json")


def sentencepiece_style_bpe(directory: Path) -> Path:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    tokenizer.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="first")
    specials = ["<unk>", "<s>", "</s>"] + [f"<0x{i:02X}>" for i in range(256)]
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=specials, show_progress=False)
    tokenizer.train_from_iterator(_corpus(), trainer)
    return _save(tokenizer, directory / "sentencepiece-style-bpe-32k.json")


def _save(tokenizer, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(path))
    return path
