"""The search on fake step functions with a known limit: converges within the precision in bounded steps."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from replayer.capacity.search import (
    BUDGET,
    CLIENT_BOUND,
    CONVERGED,
    MAX_FACTOR,
    MAX_STEPS,
    MIN_FACTOR,
    SearchSettings,
    search,
)


@dataclass
class Fake:
    passed: bool
    client_bound: bool = False
    interrupted: bool = False


def limit_at(limit: float, client_bound_from: float | None = None):
    def step(factor, kind):
        bound = client_bound_from is not None and factor >= client_bound_from
        return Fake(factor <= limit, client_bound=bound)

    return step


def test_doubles_then_bisects_to_the_precision_and_sustains():
    out = search(limit_at(5.3), SearchSettings(precision=0.05))
    assert out.stop_reason == CONVERGED
    assert out.last_pass <= 5.3 < out.first_fail
    assert (out.first_fail - out.last_pass) / out.last_pass <= 0.05
    assert out.confirmed == out.last_pass
    assert [f for f, _, _ in out.steps[:4]] == [1.0, 2.0, 4.0, 8.0]
    assert out.steps[-1][1] == "sustain" and len(out.steps) <= 12


def test_a_failing_start_halves_until_one_passes():
    out = search(limit_at(0.3), SearchSettings(precision=0.1))
    assert [f for f, _, _ in out.steps[:3]] == [1.0, 0.5, 0.25]
    assert out.last_pass <= 0.3 < out.first_fail and out.stop_reason == CONVERGED


def test_nothing_passes_down_to_the_floor():
    out = search(limit_at(0.0), SearchSettings(min_factor=0.1))
    assert out.stop_reason == MIN_FACTOR and out.last_pass is None


def test_max_factor_stops_a_search_that_always_passes():
    out = search(limit_at(1e9), SearchSettings(max_factor=16))
    assert out.stop_reason == MAX_FACTOR and out.last_pass == 16


def test_the_budget_stops_it():
    ticks = iter(range(100))
    out = search(limit_at(5.3), SearchSettings(budget_s=3), clock=lambda: next(ticks))
    assert out.stop_reason == BUDGET and len(out.steps) == 2


def test_a_client_bound_step_stops_the_search_and_is_not_a_limit():
    out = search(limit_at(100, client_bound_from=4), SearchSettings())
    assert out.stop_reason == CLIENT_BOUND and out.last_pass == 2 and out.first_fail is None
    assert out.confirmed is None


def test_a_failing_sustain_steps_down_by_the_precision():
    def step(factor, kind):
        return Fake(factor <= (4.0 if kind == "search" else 3.7))

    out = search(step, SearchSettings(precision=0.05))
    sustains = [f for f, kind, _ in out.steps if kind == "sustain"]
    assert len(sustains) >= 2 and out.confirmed == sustains[-1] <= 3.7


@settings(max_examples=60, deadline=None)
@given(
    limit=st.floats(0.02, 200),
    start=st.floats(0.05, 50),
    precision=st.floats(0.01, 0.5),
)
def test_any_limit_converges_in_bounded_steps(limit, start, precision):
    out = search(limit_at(limit), SearchSettings(start_factor=start, precision=precision, max_factor=64))
    assert len(out.steps) <= SearchSettings().max_steps
    if out.stop_reason == CONVERGED:
        assert out.last_pass <= limit < out.first_fail
        assert (
            out.first_fail - out.last_pass
        ) / out.last_pass <= precision or out.first_fail <= out.last_pass * 1.001 + 1e-3
    else:
        assert out.stop_reason in (MAX_FACTOR, MIN_FACTOR)


def knee_at(knee: float):
    """A knee bracket over fake probes carrying their factor: on the line up to `knee`."""

    def bracket(probes):
        factors = sorted({p.factor for p in probes})
        past = [f for f in factors if f > knee]
        hi = past[0] if past else None
        below = [f for f in factors if f <= knee]
        return (below[-1] if below else None), hi

    return bracket


@dataclass
class Probe:
    factor: float
    passed: bool
    client_bound: bool = False
    interrupted: bool = False


def test_after_the_limit_the_knee_is_bracketed_and_bisected_to_the_precision():
    def step(factor, kind):
        return Probe(factor, factor <= 1.5)

    out = search(step, SearchSettings(precision=0.05), knee_bracket=knee_at(2.7))
    knees = [f for f, kind, _ in out.steps if kind == "knee"]
    lo, hi = knee_at(2.7)([p for _, _, p in out.steps])
    assert out.stop_reason == CONVERGED and out.confirmed == out.last_pass <= 1.5
    assert knees[0] == 4.0 and lo <= 2.7 < hi and (hi - lo) / lo <= 0.05
    assert len(out.steps) <= 20 and len({(f, k) for f, k, _ in out.steps}) == len(out.steps)


def test_the_knee_is_not_refined_past_max_steps_or_when_every_step_is_below_it_at_max_factor():
    def step(factor, kind):
        return Probe(factor, factor <= 1.5)

    capped = search(step, SearchSettings(precision=0.05, max_steps=8), knee_bracket=knee_at(2.7))
    assert capped.stop_reason == MAX_STEPS and len(capped.steps) == 8 and capped.confirmed is not None
    never = search(step, SearchSettings(precision=0.05, max_factor=4), knee_bracket=knee_at(100))
    assert never.stop_reason == CONVERGED and max(f for f, _, _ in never.steps) == 4
