"""Drives the engine on the event loop: each step ends at an absolute deadline (no drift), timers are
callbacks (one per step), lateness is reported per step, and a big batch's writes go out in slices
so arrivals are stamped meanwhile. Why: docs/design/sim-timing.md."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

from llmreplay.sim.engine import Engine, StepPlan

EARLY_TOLERANCE_NS = 50_000
EMIT_SLICE_NS = 200_000
# Behind by more than this, the engine re-anchors on "now" instead of bursting to catch up.
MAX_CATCH_UP_NS = 20_000_000


@dataclass(frozen=True, slots=True)
class StepRecord:
    start_mono_ns: int
    deadline_mono_ns: int
    end_mono_ns: int  # when the step's tokens began to be written
    emit_ns: int  # from the first write to the last (slices, with the loop's other work between)
    batch_size: int
    admitted: int
    prefill_tokens: int
    spiked: bool

    @property
    def lateness_ns(self) -> int:
        return self.end_mono_ns - self.deadline_mono_ns


class EngineStepper:
    """Runs steps back to back while the engine has work; idles (no timer) otherwise."""

    def __init__(
        self, engine: Engine, loop: asyncio.AbstractEventLoop, on_step: Callable[[StepRecord], None]
    ):
        self._engine = engine
        self._loop = loop
        self._on_step = on_step
        self._busy = False  # a step is scheduled or a start is pending
        self._plan: StepPlan | None = None
        self._start_ns = 0
        self._deadline_ns = 0
        self._emission = None  # the step's remaining writes (Engine.emit_step), between slices
        self._emit_start_ns = 0

    def kick(self) -> None:
        """New work arrived: start a step soon if idle (call_soon batches same-iteration arrivals)."""
        if not self._busy:
            self._busy = True
            self._loop.call_soon(self._start_idle)

    def _start_idle(self) -> None:
        self._begin(time.perf_counter_ns())

    def _begin(self, start_ns: int) -> None:
        plan = self._engine.begin_step(start_ns)
        if plan is None:
            self._busy = False
            self._plan = None
            return
        self._plan = plan
        self._start_ns = start_ns
        self._deadline_ns = start_ns + plan.duration_ns
        self._arm()

    def _arm(self) -> None:
        delay_ns = self._deadline_ns - time.perf_counter_ns()
        self._loop.call_later(max(delay_ns, 0) / 1e9, self._fire)

    def _fire(self) -> None:
        now_ns = time.perf_counter_ns()
        if now_ns < self._deadline_ns - EARLY_TOLERANCE_NS:
            self._arm()
            return
        self._emit_start_ns = now_ns
        self._emission = self._engine.emit_step(now_ns, time.perf_counter_ns, EMIT_SLICE_NS)
        self._emit()

    def _emit(self) -> None:
        if next(self._emission, True) is None:  # a slice written, more to come
            self._loop.call_soon(self._emit)  # after the loop's next poll for new requests
            return
        self._emission = None
        now_ns = self._emit_start_ns
        plan = self._plan
        emit_ns = time.perf_counter_ns() - now_ns
        self._on_step(
            StepRecord(
                self._start_ns,
                self._deadline_ns,
                now_ns,
                emit_ns,
                plan.batch_size,
                plan.admitted,
                plan.prefill_tokens,
                plan.spiked,
            )
        )
        next_start_ns = self._deadline_ns
        if now_ns - next_start_ns > MAX_CATCH_UP_NS:
            next_start_ns = now_ns
        self._begin(next_start_ns)
