"""Tokenizers behind one small interface: count, encode, decode, id.

Three implementations: the offline default (Mistral's Tekken vocabulary, shipped inside the
`mistral-common` wheel, so nothing is downloaded at run time), a Hugging Face `tokenizer.json`
file, and a tiktoken encoding. Counts never include BOS/EOS or chat-template tokens.
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path
from typing import Protocol

from llmreplay.errors import BadInput, first_line

DEFAULT_TOKENIZER = "mistral-tekken"


class Tokenizer(Protocol):
    id: str

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: list[int]) -> str: ...

    def count(self, text: str) -> int: ...

    def encode_batch(self, texts: list[str]) -> list[list[int]]: ...

    def vocab_size(self) -> int: ...


class TekkenTokenizer:
    """Mistral's Tekken BPE (tiktoken-based, 131k vocabulary), as used by Mistral NeMo and later."""

    def __init__(self, path: Path, name: str):
        from mistral_common.tokens.tokenizers.tekken import Tekkenizer

        self._tekken = Tekkenizer.from_file(path)
        # The underlying tiktoken Encoding: encode_ordinary gives the same ids (Tekken registers no
        # special tokens in it) 3-4x faster, and never raises on text that looks like "<s>".
        self._bpe = self._tekken._model
        self._offset = self._tekken.num_special_tokens
        self.id = name

    def encode(self, text: str) -> list[int]:
        offset = self._offset
        return [t + offset for t in self._bpe.encode_ordinary(text)]

    def decode(self, ids: list[int]) -> str:
        return self._tekken.decode(list(ids))

    def count(self, text: str) -> int:
        return len(self._bpe.encode_ordinary(text))

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [self.encode(text) for text in texts]

    def vocab_size(self) -> int:
        return self._tekken.n_words


class TiktokenTokenizer:
    """A tiktoken encoding by name (it must be available offline: cached or from a plugin package)."""

    def __init__(self, encoding, name: str):
        self._encoding = encoding
        self.id = name

    def encode(self, text: str) -> list[int]:
        return self._encoding.encode_ordinary(text)

    def decode(self, ids: list[int]) -> str:
        return self._encoding.decode(list(ids))

    def count(self, text: str) -> int:
        return len(self._encoding.encode_ordinary(text))

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return self._encoding.encode_ordinary_batch(texts)

    def vocab_size(self) -> int:
        return self._encoding.n_vocab


class HuggingFaceTokenizer:
    """A `tokenizer.json` file read by the `tokenizers` library (no model hub access)."""

    def __init__(self, path: Path):
        from tokenizers import Tokenizer as HFTokenizer

        self._tokenizer = HFTokenizer.from_file(str(path))
        digest = hashlib.sha256(path.read_bytes()).hexdigest()[:12]
        self.id = f"hf:{path.name}#{digest}"

    def encode(self, text: str) -> list[int]:
        return self._tokenizer.encode(text, add_special_tokens=False).ids

    def decode(self, ids: list[int]) -> str:
        return self._tokenizer.decode(list(ids), skip_special_tokens=False)

    def count(self, text: str) -> int:
        return len(self.encode(text))

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [e.ids for e in self._tokenizer.encode_batch(texts, add_special_tokens=False)]

    def vocab_size(self) -> int:
        return self._tokenizer.get_vocab_size(with_added_tokens=True)


def _tekken_path() -> Path:
    import mistral_common

    return Path(mistral_common.__file__).parent / "data" / "tekken_240911.json"


def parse_tokenizer_spec(spec: str | None) -> tuple[str, str]:
    """(kind, argument) of a `--tokenizer` value, a key of _LOADERS; BadInput when it is malformed.

    Loads nothing (no tokenizer library, no engine call): the recorder's proxy checks with it.
    """
    spec = spec or DEFAULT_TOKENIZER
    if spec == DEFAULT_TOKENIZER:
        return "tekken", spec
    if spec.startswith("engine:"):
        from llmreplay.engine_tokenizer import parse_engine_spec

        parse_engine_spec(spec)
        return "engine", spec
    if spec.startswith("calibrated:"):
        from llmreplay.calibrated_tokenizer import parse_calibrated_spec

        _, local_spec = parse_calibrated_spec(spec)
        parse_tokenizer_spec(local_spec)
        return "calibrated", spec
    if spec.startswith("tiktoken:") and len(spec) > len("tiktoken:"):
        return "tiktoken", spec.removeprefix("tiktoken:")
    path = Path(spec.removeprefix("hf:")).expanduser()
    if path.suffix == ".json" or spec.startswith("hf:"):
        if not path.is_file():
            raise BadInput(f"--tokenizer {spec}: no such file")
        return "hf", str(path)
    raise BadInput(
        f"--tokenizer {spec}: unknown tokenizer (use '{DEFAULT_TOKENIZER}', 'tiktoken:<encoding>' "
        "or a path to a Hugging Face tokenizer.json)"
    )


@functools.lru_cache(maxsize=8)
def load_tokenizer(spec: str | None = None) -> Tokenizer:
    """Resolve `--tokenizer` (parse_tokenizer_spec): `mistral-tekken`, `tiktoken:<encoding>`, a
    Hugging Face `tokenizer.json` path (`.json` or `hf:`), `engine:...` or `calibrated:...`."""
    kind, argument = parse_tokenizer_spec(spec)
    return _LOADERS[kind](argument)


def _load_tekken(name: str) -> TekkenTokenizer:
    return TekkenTokenizer(_tekken_path(), name)


def _load_engine(spec: str) -> Tokenizer:
    from llmreplay.engine_tokenizer import from_spec

    return from_spec(spec)


def _load_calibrated(spec: str) -> Tokenizer:
    from llmreplay.calibrated_tokenizer import CalibratedTokenizer, parse_calibrated_spec

    calibration, local_spec = parse_calibrated_spec(spec)
    return CalibratedTokenizer(load_tokenizer(local_spec), calibration, local_spec)


def _load_hf(path: str) -> HuggingFaceTokenizer:
    try:
        return HuggingFaceTokenizer(Path(path))
    except Exception as exc:  # the tokenizers library raises plain Exception subclasses
        raise BadInput(
            f"--tokenizer {path}: not a Hugging Face tokenizer.json ({first_line(exc)})"
        ) from None


def _load_tiktoken(name: str) -> TiktokenTokenizer:
    import tiktoken

    try:
        encoding = tiktoken.get_encoding(name)
    except Exception as exc:  # tiktoken raises ValueError for unknown names, network errors when not cached
        raise BadInput(
            f"--tokenizer tiktoken:{name}: encoding not available offline ({first_line(exc)}); "
            f"known here: {', '.join(sorted(tiktoken.list_encoding_names()))}"
        ) from None
    return TiktokenTokenizer(encoding, f"tiktoken:{name}")


_LOADERS = {
    "tekken": _load_tekken,
    "tiktoken": _load_tiktoken,
    "hf": _load_hf,
    "engine": _load_engine,
    "calibrated": _load_calibrated,
}


