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
    content_errors: list = field(default_factory=list)  # recorded content: target count / recorded - 1

    def as_dict(self) -> dict:
        return {
            "synthesized_exact": self.exact,
            "synthesized_off": self.off,
            "worst_off_tokens": self.worst_off,
            "counting_calls": self.calls,
            "layout_corrections": {"/".join(k[0]) + f"+{k[1]} tools": v for k, v in self.corrections.items()},
            "content": content_summary(self.content_errors),
        }


def content_summary(errors: list[float]) -> dict | None:
    """Recorded content as the target counts it: exact share and relative error p50/p90 (signed)."""
    if not errors:
        return None
    ordered = sorted(errors)
    pick = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))]  # noqa: E731
    return {
        "requests": len(ordered),
        "exact_share": sum(1 for e in ordered if e == 0) / len(ordered),
        "relative_error_p50": pick(0.5),
        "relative_error_p90": pick(0.9),
        "hint": None if pick(0.9) == 0 and pick(0.1) == 0 else "--fit-lengths respells it to the target's counts",
    }


class PromptFitter:
    """Respells with a token correction until the target counts the recorded length."""

    def __init__(self, counter: ChatCounter):
        self.counter = counter
        self.stats = FitStats()

    def fit_chat(self, recorded: int, layout: tuple, spell: Callable[[int], tuple[list, list | None]]):
        """(messages, tools) spelled so the target's count is `recorded`; `spell(correction)` respells."""
        return self._fit(recorded, layout, spell, lambda body: self.counter.count_chat(*body))

    def measure_chat(self, recorded: int, messages: list, tools: list | None) -> None:
        """Count recorded content on the target without changing it (reported before the clock)."""
        counted = self.counter.count_chat(messages, tools)
        self.stats.calls += 1
        self.stats.content_errors.append(counted / max(recorded, 1) - 1.0)

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
