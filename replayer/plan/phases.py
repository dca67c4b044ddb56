"""A run's phases on the open-loop clock: the warm-up before the measured window, and --soak loops of it.

Pure functions over numpy columns, no I/O. A soak loop travels in the plan's copy index
(`loop * loop_stride + copy`), so every loop is its own session chain with its own nonce like a
--scale copy; `split_copy` turns it back into (loop, copy) for the results.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from llmreplay.durations import format_duration
from llmreplay.errors import BadInput


@dataclass(frozen=True, slots=True)
class Window:
    """The trace offsets (ns from the first request) replayed: [warm_from, to), measured from `measured_from`."""

    warm_from_ns: int
    measured_from_ns: int
    to_ns: int | None
    asked_warmup_ns: int

    @property
    def warmup_ns(self) -> int:
        """The warm-up actually replayed (shorter than asked when the trace starts too late)."""
        return self.measured_from_ns - self.warm_from_ns

    @property
    def shortened(self) -> bool:
        return self.warmup_ns < self.asked_warmup_ns


def trace_window(from_ns: int | None, to_ns: int | None, warmup_ns: int) -> Window:
    """Without --from the first `warmup_ns` of the trace is the warm-up; with it, the stretch just before."""
    measured_from = from_ns if from_ns is not None else warmup_ns
    if to_ns is not None and warmup_ns and from_ns is None and to_ns <= measured_from:
        raise BadInput(
            f"--to: must be later than --warmup {format_duration(warmup_ns)} (the measured window's start)"
        )
    return Window(max(0, measured_from - warmup_ns), measured_from, to_ns, warmup_ns)


@dataclass(frozen=True, slots=True)
class Phases:
    """What the schedule planned beyond the trace window: the warm-up and the soak loops (run.json's `phases`)."""

    warmup_s: float = 0.0  # replayed warm-up, trace time
    asked_warmup_s: float = 0.0
    measured_from_s: float = 0.0  # the measured window in trace time, from the first request
    measured_to_s: float | None = None
    measured_start_offset_s: float = 0.0  # on the run's clock: warm-up / speed
    first_measured_record: int = 0  # trace rows before it (in the plan) are warm-up rows
    loop_stride: int = 0  # with --soak: plan copy index = loop * loop_stride + copy; 0: no loops
    loop_span_s: float = 0.0  # loop k is loop 0 shifted by k * loop_span_s (run clock)
    soak_s: float | None = None
    soak_keep_sharing: bool = False
    loops_planned: int = 1

    def as_dict(self) -> dict:
        return asdict(self)


def loop_span_ns(offsets_ns: np.ndarray) -> int:
    """One loop's length: the measured plans' first-to-last due offset plus their median gap, so the
    next loop's first request comes one typical gap after this loop's last (1 ms at least)."""
    if len(offsets_ns) == 0:
        return 1_000_000
    ordered = np.sort(offsets_ns)
    gap = float(np.median(np.diff(ordered))) if len(ordered) > 1 else 0.0
    return max(1_000_000, int(ordered[-1] - ordered[0]) + round(gap))


def loops_for(soak_ns: int, span_ns: int) -> int:
    """Loops that start within the soak: each starts `span_ns` after the one before."""
    return max(1, -(-soak_ns // span_ns))


def split_copy(plan_copy: int, stride: int) -> tuple[int, int]:
    """(loop, copy) of a plan's copy index (`stride` 0: no loops)."""
    return divmod(plan_copy, stride) if stride else (0, plan_copy)


def prompt_copy(plan_copy: int, stride: int, keep_sharing: bool) -> int:
    """The copy whose prompts a plan sends: its own, or with --soak-keep-sharing the loop-0 copy's."""
    return plan_copy % stride if keep_sharing and stride else plan_copy


def loop_name(name: str, loop: int) -> str:
    """A request id or session id in soak loop k (`#l<k>` after any copy suffix; loop 0 keeps it)."""
    return name if loop == 0 else f"{name}#l{loop}"


def completed_loops(planned_loops: np.ndarray, result_loops: np.ndarray) -> int:
    """Loops (numbers of each plan, of each results row) whose every planned request has a row, from loop 0 on."""
    planned = np.bincount(planned_loops)
    got = np.bincount(result_loops, minlength=len(planned))[: len(planned)]
    short = np.flatnonzero(got < planned)
    return int(short[0]) if len(short) else len(planned)
