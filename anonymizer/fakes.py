"""The sources of fake values for one anonymization run: exact-length text, identifiers, numbers.

Every fake is a deterministic function of the secret key and the original value, so equal originals
get equal fakes across the whole trace; identifiers are also kept distinct (the mapping is injective).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from anonymizer.keys import Rekeyer
from llmreplay.exact_text import ExactText
from llmreplay.tokenizers import Tokenizer

_IDENTIFIER_ATTEMPTS = 6


@dataclass
class Fakes:
    tokenizer: Tokenizer
    exact: ExactText
    rekeyer: Rekeyer
    _identifiers: dict[str, str] = field(default_factory=dict)
    _taken: set[str] = field(default_factory=set)
    inexact_identifiers: int = 0

    def count(self, text: str) -> int:
        return self.tokenizer.count(text)

    def text_for(self, value: str) -> str:
        """Words with the token count of `value`, seeded by the value itself (same value, same text)."""
        return self.exact.text(self.count(value), self.rekeyer.seed("leaf", value.encode()))

    def identifier(self, name: str) -> str:
        """A snake_case name of Faker words, with the token count of `name` when one can be found.

        Injective over the run: two different names never get the same replacement.
        """
        found = self._identifiers.get(name)
        if found is not None:
            return found
        target = self.count(name)
        best = None
        for attempt in range(_IDENTIFIER_ATTEMPTS * max(1, target)):
            words = max(1, target - attempt % max(1, target))
            seed = self.rekeyer.seed("identifier", f"{attempt}\0{name}".encode())
            candidate = "_".join(self.exact.text(words, seed).split())
            if candidate in self._taken:
                continue
            if self.count(candidate) == target:
                best = candidate
                break
            if best is None:
                best = candidate
        if best is None or self.count(best) != target:
            self.inexact_identifiers += 1
            suffix = 0
            while best is None or best in self._taken:
                best = f"{best or 'name'}_{suffix}"
                suffix += 1
        self._identifiers[name] = best
        self._taken.add(best)
        return best

    def number(self, value: int | float) -> int | float:
        """A keyed number with the same digit layout (sign, digit count, decimal point position)."""
        text = repr(value)
        digest = self.rekeyer.seed("number", text.encode()) * 4
        out, position = [], 0
        for char in text:
            if char.isdigit():
                digit = digest[position % len(digest)] % 10
                first = position == 0
                if first and len([c for c in text if c.isdigit()]) > 1 and digit == 0:
                    digit = 1 + digest[position % len(digest)] % 9
                out.append(str(digit))
                position += 1
            else:
                out.append(char)
        new = "".join(out)
        if isinstance(value, int):
            return int(new)
        if "." in new and "e" not in new and new.endswith("0"):
            new = new[:-1] + "1"
        return float(new)
