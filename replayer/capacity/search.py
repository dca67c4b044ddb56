"""The search over load factors: bracket the SLO limit by doubling (or halving), bisect it to the
precision, confirm it with one longer sustain step; then, with the steps and budget left, bracket and
bisect the knee to the precision too. Pure: it calls the step and knee functions it is given, reads a clock.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

SEARCH, SUSTAIN, KNEE = "search", "sustain", "knee"
CONVERGED, BUDGET, MAX_FACTOR, MIN_FACTOR = "converged", "budget", "max_factor", "min_factor"
CLIENT_BOUND, INTERRUPTED, MAX_STEPS = "client_bound", "interrupted", "max_steps"
DEFAULT_MAX_STEPS = 40  # --max-steps
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
    max_steps: int = DEFAULT_MAX_STEPS
    sustain_retries: int = 3  # sustain steps after the first that failed, each one precision lower


@dataclass(slots=True)
class SearchOutcome:
    """The decisions: every (factor, kind, probe) in order, the bracket, the limit and why it stopped."""

    steps: list[tuple[float, str, Probe]] = field(default_factory=list)
    last_pass: float | None = None  # the largest factor that held in the search steps
    first_fail: float | None = None  # the smallest factor above it that did not
    confirmed: float | None = None  # the factor a sustain step held (the limit)
    stop_reason: str = CONVERGED


# The knee's bracket from the steps so far: (lo, hi], lo the largest factor still below the knee (None:
# none below it), hi the smallest past it (None: none seen yet). See replayer.capacity.points.
KneeBracket = Callable[[list], tuple[float | None, float | None]]


class _Stop(Exception):
    def __init__(self, reason: str):
        self.reason = reason


def rounded(factor: float) -> float:
    return float(f"{factor:.{SIGNIFICANT_DIGITS}g}")


def search(
    run_step: Callable[[float, str], Probe],
    settings: SearchSettings,
    clock=time.monotonic,
    knee_bracket: KneeBracket | None = None,
) -> SearchOutcome:
    """Run the search with `run_step(factor, kind)`; with `knee_bracket(probes)` the knee is refined
    after the limit is confirmed. Every load loop here is bounded in steps and time."""
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
        if knee_bracket is not None:
            _knee(probe, settings, outcome, knee_bracket)
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


def _knee(probe, settings: SearchSettings, outcome: SearchOutcome, knee_bracket: KneeBracket) -> None:
    """Double above the largest factor until a step is past the knee (halve below the smallest when every
    step is), then bisect the bracket to the precision; factors already run are not run again."""
    while True:
        tried = {factor for factor, _, result in outcome.steps if not result.client_bound}
        lo, hi = knee_bracket([result for _, _, result in outcome.steps])
        if hi is None:
            top = max(tried)
            if top >= settings.max_factor:
                return
            factor = rounded(min(2 * top, settings.max_factor))
        elif lo is None:
            factor = rounded(min(tried) / 2)
            if factor < settings.min_factor:
                return
        elif (hi - lo) / lo > settings.precision:
            factor = rounded((lo + hi) / 2)
            if factor in (lo, hi):
                return
        else:
            return
        if factor in tried:
            return
        probe(factor, KNEE)
