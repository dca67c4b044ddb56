"""The search over load factors: bracket by doubling (or halving), bisect to the precision, confirm
with one longer sustain step. Pure: it only calls the step function it is given and reads a clock.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

SEARCH, SUSTAIN = "search", "sustain"
CONVERGED, BUDGET, MAX_FACTOR, MIN_FACTOR = "converged", "budget", "max_factor", "min_factor"
CLIENT_BOUND, INTERRUPTED, MAX_STEPS = "client_bound", "interrupted", "max_steps"
SIGNIFICANT_DIGITS = 4  # factors are rounded so step directories and reruns agree


class Probe(Protocol):
    """What the search reads of a step: did the server hold it, was the client the limit, was it stopped."""

    passed: bool
    client_bound: bool
    interrupted: bool


@dataclass(frozen=True, slots=True)
class SearchSettings:
    start_factor: float = 1.0
    precision: float = 0.05  # stop bisecting when (hi - lo) / lo <= precision
    max_factor: float = 64.0
    min_factor: float = 1 / 64
    budget_s: float = 3600.0
    max_steps: int = 40
    sustain_retries: int = 3  # sustain steps after the first that failed, each one precision lower


@dataclass(slots=True)
class SearchOutcome:
    """The decisions: every (factor, kind, probe) in order, the bracket, the limit and why it stopped."""

    steps: list[tuple[float, str, Probe]] = field(default_factory=list)
    last_pass: float | None = None  # the largest factor that held in the search steps
    first_fail: float | None = None  # the smallest factor above it that did not
    confirmed: float | None = None  # the factor a sustain step held (the limit)
    stop_reason: str = CONVERGED


class _Stop(Exception):
    def __init__(self, reason: str):
        self.reason = reason


def rounded(factor: float) -> float:
    return float(f"{factor:.{SIGNIFICANT_DIGITS}g}")


def search(
    run_step: Callable[[float, str], Probe], settings: SearchSettings, clock=time.monotonic
) -> SearchOutcome:
    """Run the search with `run_step(factor, kind)`; every load loop here is bounded in steps and time."""
    outcome = SearchOutcome()
    started = clock()

    def probe(factor: float, kind: str) -> bool:
        if len(outcome.steps) >= settings.max_steps:
            raise _Stop(MAX_STEPS)
        if clock() - started >= settings.budget_s:
            raise _Stop(BUDGET)
        try:
            result = run_step(factor, kind)
        except KeyboardInterrupt:
            raise _Stop(INTERRUPTED) from None
        outcome.steps.append((factor, kind, result))
        if result.interrupted:
            raise _Stop(INTERRUPTED)
        if result.client_bound:
            raise _Stop(CLIENT_BOUND)
        return result.passed

    try:
        _bracket(probe, settings, outcome)
        _bisect(probe, settings, outcome)
        _sustain(probe, settings, outcome)
    except _Stop as stop:
        outcome.stop_reason = stop.reason
    return outcome


def _bracket(probe, settings: SearchSettings, outcome: SearchOutcome) -> None:
    factor = rounded(min(settings.start_factor, settings.max_factor))
    if probe(factor, SEARCH):
        outcome.last_pass = factor
        while outcome.first_fail is None:
            if outcome.last_pass >= settings.max_factor:
                raise _Stop(MAX_FACTOR)
            factor = rounded(min(2 * outcome.last_pass, settings.max_factor))
            if probe(factor, SEARCH):
                outcome.last_pass = factor
            else:
                outcome.first_fail = factor
        return
    outcome.first_fail = factor
    while outcome.last_pass is None:
        factor = rounded(outcome.first_fail / 2)
        if factor < settings.min_factor:
            raise _Stop(MIN_FACTOR)
        if probe(factor, SEARCH):
            outcome.last_pass = factor
        else:
            outcome.first_fail = factor


def _bisect(probe, settings: SearchSettings, outcome: SearchOutcome) -> None:
    while (outcome.first_fail - outcome.last_pass) / outcome.last_pass > settings.precision:
        factor = rounded((outcome.last_pass + outcome.first_fail) / 2)
        if factor in (outcome.last_pass, outcome.first_fail):  # rounding leaves nothing between them
            return
        if probe(factor, SEARCH):
            outcome.last_pass = factor
        else:
            outcome.first_fail = factor


def _sustain(probe, settings: SearchSettings, outcome: SearchOutcome) -> None:
    """Confirm the limit with a longer step; on failure step down by the precision (bounded)."""
    factor = outcome.last_pass
    for _ in range(1 + settings.sustain_retries):
        if factor < settings.min_factor:
            raise _Stop(MIN_FACTOR)
        if probe(factor, SUSTAIN):
            outcome.confirmed = factor
            return
        factor = rounded(factor * (1 - settings.precision))
    raise _Stop(MAX_STEPS)
