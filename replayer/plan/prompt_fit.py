"""Synthesized prompts whose length on the target, chat template and tools included, is the trace's.

The trace's prompt_tokens is what production's engine counted. The target's template adds its own
tokens (and may trim a message's first space), so the last message is respelled by the measured
difference until the target's count matches; the correction per layout is remembered.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

MAX_ROUNDS = 4


class ChatCounter(Protocol):
    id: str

    def count_chat(self, messages: list[dict], tools: list[dict] | None = None) -> int: ...

    def count_prompt(self, text: str) -> int: ...


@dataclass
class FitStats:
    """How the fitting went over a run's requests: exact, off (could not be reached) and calls made."""

    exact: int = 0
    off: int = 0
    calls: int = 0
    worst_off: int = 0
    corrections: dict = field(default_factory=dict)  # layout -> token correction last used

    def as_dict(self) -> dict:
        return {
            "exact": self.exact,
            "off": self.off,
            "counting_calls": self.calls,
            "worst_off_tokens": self.worst_off,
            "layout_corrections": {"/".join(k[0]) + f"+{k[1]} tools": v for k, v in self.corrections.items()},
        }


class PromptFitter:
    """Respells with a token correction until the target counts the recorded length."""

    def __init__(self, counter: ChatCounter):
        self.counter = counter
        self.stats = FitStats()

    def fit_chat(self, recorded: int, layout: tuple, spell: Callable[[int], tuple[list, list | None]]):
        """(messages, tools) spelled so the target's count is `recorded`; `spell(correction)` respells."""
        return self._fit(recorded, layout, spell, lambda body: self.counter.count_chat(*body))

    def fit_prompt(self, recorded: int, spell: Callable[[int], str]) -> str:
        return self._fit(recorded, (("prompt",), 0), spell, self.counter.count_prompt)

    def _fit(self, recorded, key, spell, count):
        correction = self.stats.corrections.get(key, 0)
        best = None
        for _ in range(MAX_ROUNDS):
            body = spell(correction)
            counted = count(body)
            self.stats.calls += 1
            miss = recorded - counted
            if best is None or abs(miss) < abs(best[1]):
                best = (body, miss)
            if miss == 0:
                self.stats.exact += 1
                self.stats.corrections[key] = correction
                return body
            correction += miss
        self.stats.off += 1
        self.stats.worst_off = max(self.stats.worst_off, abs(best[1]))
        return best[0]
