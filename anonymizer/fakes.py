"""The sources of fake values for one anonymization run: exact-length text, identifiers, numbers.

Every fake is a deterministic function of the secret key and the original value, so equal originals
get equal fakes across the whole trace; identifiers are also kept distinct (the mapping is injective).
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass, field

from anonymizer.identifiers import IdentifierWords
from anonymizer.keys import Rekeyer
from llmreplay.exact_text import ExactText
from llmreplay.tokenizers import Tokenizer

_IDENTIFIER_ATTEMPTS = 16  # only collisions with names already taken need a retry


@dataclass
class Fakes:
    tokenizer: Tokenizer
    exact: ExactText
    rekeyer: Rekeyer
    _identifiers: dict[str, str] = field(default_factory=dict)
    _taken: set[str] = field(default_factory=set)
    inexact_identifiers: int = 0
    identifier_words: IdentifierWords = field(init=False, repr=False)

    def __post_init__(self):
        self.identifier_words = IdentifierWords(self.tokenizer, self.exact)

    def count(self, text: str) -> int:
        return self.tokenizer.count(text)

    def text_for(self, value: str) -> str:
        """Words with the token count of `value`, seeded by the value itself (same value, same text)."""
        return self.exact.text(self.count(value), self.rekeyer.seed("leaf", value.encode()))

    def opaque(self, value: str) -> str:
        """A keyed stand-in of the same length for an encrypted blob (a thinking signature, encrypted
        reasoning, redacted thinking): base64 characters; it counts no prompt tokens."""
        seed = self.rekeyer.seed("opaque", value.encode("utf-8", "surrogatepass"))
        raw = b"".join(
            hashlib.blake2b(seed + i.to_bytes(4, "little"), digest_size=64).digest()
            for i in range(len(value) // 85 + 1)
        )
        return base64.b64encode(raw).decode()[: len(value)]

    def identifier(self, name: str) -> str:
        """A snake_case name of generator words with the token count of `name`.

        Injective over the run: two different names never get the same replacement. Only when
        every candidate collides or the tokenizer merges the pieces is a name inexact (counted).
        """
        found = self._identifiers.get(name)
        if found is not None:
            return found
        target = self.count(name)
        first = None
        for attempt in range(_IDENTIFIER_ATTEMPTS):
            seed = self.rekeyer.seed("identifier", f"{attempt}\0{name}".encode())
            candidate = self.identifier_words.name(target, seed)
            first = candidate if first is None else first
            if candidate not in self._taken and self.count(candidate) == target:
                return self._take(name, candidate)
        self.inexact_identifiers += 1
        best, suffix = first or "name", 0
        while best in self._taken:
            best = f"{first or 'name'}_{suffix}"
            suffix += 1
        return self._take(name, best)

    def _take(self, name: str, new: str) -> str:
        self._identifiers[name] = new
        self._taken.add(new)
        return new

    def number(self, value: int | float) -> int | float:
        """A keyed number with the same digit layout (sign, digit count, decimal point position) and
        no digit of the original left in its place.
        """
        text = repr(value)
        digest = self.rekeyer.seed("number", text.encode()) * 4
        places = [i for i, char in enumerate(text) if char.isdigit()]
        mantissa = text.split("e")[0]
        last_decimal = len(mantissa) - 1 if "." in mantissa else None
        out = list(text)
        for position, place in enumerate(places):
            banned = {text[place]}
            if position == 0 and (text[0] == "-" or len(places) > 1):
                banned.add("0")  # no leading zero, no "-0"
            if place == last_decimal:
                banned.add("0")  # repr would drop a trailing zero and change the layout
            choices = [d for d in "0123456789" if d not in banned]
            out[place] = choices[digest[position % len(digest)] % len(choices)]
        new = "".join(out)
        return int(new) if isinstance(value, int) else float(new)
