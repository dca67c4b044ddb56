"""Synthesized prompts whose length on the target, chat template and tools included, is the trace's.

The trace's prompt_tokens is what production's engine counted; the target's template adds its own
tokens. The last message is respelled by the measured difference until the target's count
matches; a layout whose correction keeps holding is then only re-counted on a sample.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

MAX_ROUNDS = 4
CALIBRATED_ROUNDS = 6  # a calibrated count is local arithmetic: a few more rounds cost no request
MIN_RATE = 0.05  # target tokens per local token assumed at least (a degenerate calibration)
TRUST_AFTER = 32  # a layout whose correction was right this many times in a row is trusted ...
SAMPLE_EVERY = 8  # ... and re-counted once in this many prompts (a miss ends the trust)
MEASURE_MAX = 1000  # recorded content counted on the target before the clock: the first this many


class ChatCounter(Protocol):
    id: str

    def count_chat(self, messages: list[dict], tools: list[dict] | None = None) -> int: ...

    def count_prompt(self, text: str) -> int: ...


@dataclass
class FitStats:
    """How the fitting went over a run's requests: exact, off (could not be reached) and calls made."""

    exact: int = 0
    trusted: int = 0  # not counted: its layout's correction had held (see TRUST_AFTER)
    off: int = 0
    calls: int = 0
    worst_off: int = 0
    corrections: dict = field(default_factory=dict)  # layout -> token correction last used
    content_errors: list = field(default_factory=list)  # recorded content: target count / recorded - 1

    def as_dict(self) -> dict:
        return {
            "synthesized_exact": self.exact,
            "synthesized_trusted": self.trusted,
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
    import numpy as np

    from llmreplay.metrics import percentiles

    values = np.asarray(errors, dtype=float)
    points = percentiles(values, (50, 90))
    return {
        "requests": len(values),
        "exact_share": float((values == 0).mean()),
        "relative_error_p50": points["p50"],
        "relative_error_p90": points["p90"],
        "hint": None if not values.any() else "--fit-lengths respells it to the target's counts",
    }


class PromptFitter:
    """Respells with a token correction until the target counts the recorded length."""

    def __init__(self, counter: ChatCounter):
        self.counter = counter
        self.stats = FitStats()
        self._seen: dict = {}
        self._streak: dict = {}  # layout -> prompts in a row its correction was right at once

    def fit_chat(self, recorded: int, layout: tuple, spell: Callable[[int], tuple[list, list | None]]):
        """(messages, tools) spelled so the target's count is `recorded`; `spell(correction)` respells."""
        return self._fit(recorded, layout, spell, lambda body: self.counter.count_chat(*body))

    def fit_api(self, recorded: int, layout: tuple, spell: Callable[[int], tuple]) -> tuple:
        """`spell(correction)` -> (the API's text, its chat messages, chat tools): the first spelled so
        that the target counts its chat view as `recorded` (vLLM templates Responses and Messages
        bodies as these chat messages)."""
        return self._fit(recorded, layout, spell, lambda body: self.counter.count_chat(body[1], body[2]))

    def measure_chat(self, recorded: int, messages: list, tools: list | None) -> None:
        """Count recorded content on the target without changing it (reported before the clock)."""
        if len(self.stats.content_errors) >= MEASURE_MAX:
            return
        counted = self.counter.count_chat(messages, tools)
        self.stats.calls += 1
        self.stats.content_errors.append(counted / max(recorded, 1) - 1.0)

    def fit_prompt(self, recorded: int, spell: Callable[[int], str]) -> str:
        return self._fit(recorded, (("prompt",), 0), spell, self.counter.count_prompt)

    def _fit(self, recorded, key, spell, count):
        stats = self.stats
        rate = getattr(self.counter, "step_rate", 1.0)
        correction = stats.corrections.get(key, 0)
        if rate != 1.0:  # a calibrated count moves `rate` per local token: start where that lands
            correction = round(recorded * (1 / max(rate, MIN_RATE) - 1))
        seen = self._seen[key] = self._seen.get(key, 0) + 1
        if self._streak.get(key, 0) >= TRUST_AFTER and seen % SAMPLE_EVERY:
            stats.trusted += 1  # this layout's correction held TRUST_AFTER times in a row
            return spell(correction)
        best = None
        for round_ in range(MAX_ROUNDS if rate == 1.0 else CALIBRATED_ROUNDS):
            body = spell(correction)
            counted = count(body)
            stats.calls += 1
            miss = recorded - counted
            if best is None or abs(miss) < abs(best[1]):
                best = (body, miss)
            if miss == 0:
                stats.exact += 1
                stats.corrections[key] = correction
                self._streak[key] = self._streak.get(key, 0) + 1 if round_ == 0 else 0
                return body
            correction += self._step(miss)
        self._streak[key] = 0
        stats.off += 1
        self.stats.worst_off = max(self.stats.worst_off, abs(best[1]))
        return best[0]

    def _step(self, miss: int) -> int:
        """The correction (local tokens) that should move the target's count by `miss`."""
        rate = getattr(self.counter, "step_rate", 1.0)
        if rate == 1.0:
            return miss
        step = round(miss / max(rate, MIN_RATE))
        return step if step else (1 if miss > 0 else -1)
