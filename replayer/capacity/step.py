"""One step: a normal `replay` run of the window at one factor, after the replay's own warm-up
(ScheduleConfig.warmup_ns), into DIR/steps/NN-x<factor>/, then measured (replayer.capacity.measure).
A finished step directory is read, not rerun; a killed, interrupted or client-bound one is redone.
"""

from __future__ import annotations

import dataclasses
import shutil
from dataclasses import dataclass
from pathlib import Path

from llmreplay.errors import BadInput
from llmreplay.run_format import RESULTS_FILE, RUN_FILE, read_run_info
from replayer.capacity.measure import CLIENT_BOUND, INTERRUPTED, PASS, Clock, measure
from replayer.config import ReplayConfig
from replayer.measured.side import load_side
from replayer.results.server_series import run_server_metrics

STEPS_DIR = "steps"
REUSE, RERUN, FRESH = "reuse", "rerun", "fresh"
BY_SPEED, BY_SCALE = "speed", "scale"


@dataclass(frozen=True, slots=True)
class StepPlan:
    """What one step replays: trace offsets (ns) of the warm-up start and the window, and the factor."""

    index: int
    factor: float
    kind: str
    warmup_start_ns: int
    window_start_ns: int
    window_end_ns: int

    @property
    def dir_name(self) -> str:
        return f"{self.index:02d}-x{self.factor:g}"


@dataclass(frozen=True, slots=True)
class StepResult:
    """A step's row of capacity.json and what the search reads of it."""

    row: dict

    @property
    def passed(self) -> bool:
        return self.row["verdict"] == PASS

    @property
    def client_bound(self) -> bool:
        return self.row["verdict"] == CLIENT_BOUND

    @property
    def interrupted(self) -> bool:
        return self.row["verdict"] == INTERRUPTED


def resume_action(run_dir: Path) -> str:
    """REUSE a finished run (run.json and results, not interrupted), RERUN anything else left there
    (a kill's .parts/, an interrupted run: the directory is ours), FRESH when there is none."""
    if not run_dir.exists():
        return FRESH
    if (run_dir / RUN_FILE).is_file() and (run_dir / RESULTS_FILE).is_file():
        try:
            stop = read_run_info(run_dir, "step").stop_reason
        except BadInput:  # a kill mid-write, or not our run: the directory is ours to redo
            return RERUN
        return RERUN if stop == "interrupted" else REUSE
    return RERUN


def step_config(template: ReplayConfig, plan: StepPlan, by: str, run_dir: Path) -> ReplayConfig:
    """The template's replay with this step's run directory, trace window, warm-up and load factor."""
    schedule = dataclasses.replace(
        template.schedule,
        from_offset_ns=plan.window_start_ns,
        to_offset_ns=plan.window_end_ns,
        warmup_ns=plan.window_start_ns - plan.warmup_start_ns,
        **({"speed": plan.factor} if by == BY_SPEED else {"scale": plan.factor}),
    )
    observe = dataclasses.replace(template.observe, run_label=f"{run_dir.parent.parent.name}/{plan.dir_name}")
    return dataclasses.replace(template, run_dir=str(run_dir), schedule=schedule, observe=observe)


def run_step(
    plan: StepPlan, template: ReplayConfig, by: str, out_dir: Path, analysis: dict, console=None, live=None
) -> StepResult:
    """Run (or reuse) the step's replay and measure it; `analysis`: slos, limits, max_error_rate.
    A reused step the client could not drive is run again (a rerun may bring more --workers).
    `live`: the search's replayer.observe.live.LiveMetrics, or None."""
    run_dir = out_dir / STEPS_DIR / plan.dir_name
    action = resume_action(run_dir)
    if action == REUSE:
        row = _measured(run_dir, plan, by, analysis)
        if row["verdict"] != CLIENT_BOUND:
            return _result(plan, run_dir, row, reused=True)
        action = RERUN
    if action == RERUN:
        shutil.rmtree(run_dir)
    from replayer.coordinator import run_replay

    run_replay(step_config(template, plan, by, run_dir), console, live)
    if resume_action(run_dir) != REUSE:  # stopped by Ctrl-C: not a step, the search ends here
        raise KeyboardInterrupt
    return _result(plan, run_dir, _measured(run_dir, plan, by, analysis), reused=False)


def _measured(run_dir: Path, plan: StepPlan, by: str, analysis: dict) -> dict:
    side = load_side(run_dir, "step")
    speed = plan.factor if by == BY_SPEED else 1.0
    phases = (side.run.phases if side.run is not None else None) or {}
    start_ns = float(phases.get("measured_start_offset_s") or 0.0) * 1e9
    clock = Clock(start_ns, (plan.window_end_ns - plan.window_start_ns) / speed)
    row = measure(side, clock, **analysis)
    metrics = run_server_metrics(run_dir, side.run)
    took_ns = 0 if side.run is None else side.run.ended_unix_ns - side.run.started_unix_ns
    return {
        **row,
        "server_metrics": None if metrics is None else metrics["summary"],
        "elapsed_s": took_ns / 1e9,
    }


def _result(plan: StepPlan, run_dir: Path, row: dict, reused: bool) -> StepResult:
    head = {
        "index": plan.index,
        "factor": plan.factor,
        "kind": plan.kind,
        "run_dir": f"{STEPS_DIR}/{plan.dir_name}",
    }
    return StepResult({**head, **row, "reused": reused})
