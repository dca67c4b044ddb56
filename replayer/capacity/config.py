"""`capacity`'s settings, declared once; a step's replay flags are ReplayConfig's own (REPLAY_FLAGS).

Light (no numpy, pyarrow or click): `--help` stays fast.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from llmreplay.errors import BadInput
from llmreplay.options import duration, factor, option, positive
from replayer.capacity.search import DEFAULT_MAX_STEPS
from replayer.config import ReplayConfig
from replayer.judge.gate_limits import slos_field

NS_PER_S = 1_000_000_000
# ReplayConfig's fields a step takes from the command line (their declarations stay there).
REPLAY_FLAGS = frozenset(
    {
        "target_url",
        "workers",
        "max_inflight",
        "engine",
        "model",
        "model_map",
        "api_key",
        "headers",
        "tokenizer",
        "server_metrics_url",
        "skip_preflight",
        "max_dispatch_lag_p99_ns",
        "max_error_rate",
        "quiet",
        "metrics_port",  # replayer.observe: one live server for the whole search, each step pushed
        "metrics_bind",
        "pushgateway",
        "remote_write",
        "push_headers",
    }
)
# What a rerun into the same -o must share with the first run to continue its search.
IDENTITY = ("trace_path", "target_url", "slos", "by", "window_s", "warmup_s", "start_factor", "sustain_s")


def _open_share(value: float, flag: str) -> None:
    if not (math.isfinite(value) and 0 < value < 1):
        raise BadInput(f"{flag} {value}: must be between 0 and 1 (0.05 is 5%)")


def _headroom_share(value: float, flag: str) -> None:
    if not (math.isfinite(value) and 0 < value <= 1):
        raise BadInput(f"{flag} {value}: must be greater than 0 and at most 1 (0.7 is 70%)")


def _money(value: float, flag: str) -> None:
    if not (math.isfinite(value) and value >= 0):
        raise BadInput(f"{flag} {value}: must be a finite amount >= 0")


@dataclass(frozen=True, slots=True)
class CapacityConfig:
    """The search's settings; `replay` is the template every step's replay is made from."""

    trace_path: str
    out_dir: str = option(
        flags=("-o", "--out"),
        required=True,
        metavar="DIR",
        help="Capacity directory (steps and capacity.json).",
    )
    slos: tuple = slos_field(
        "SLO a step must meet (its CI's upper bound), repeatable: ttft_p95<=500ms, tpot_p95<=50ms."
    )
    by: str = option(
        "scale",
        choices=("scale", "speed"),
        help="The load axis: more copies of sessions, or compressed time.",
    )
    window_ns: int = option(
        300 * NS_PER_S,
        flags=("--window",),
        help="Length of the busiest stretch replayed (0: the whole trace).",
        **duration(allow_zero=True),
    )
    step_warmup_ns: int = option(
        60 * NS_PER_S,
        flags=("--warmup",),
        help="Trace replayed before the window and never judged (capped at the trace's start).",
        **duration(allow_zero=True),
    )
    precision: float = option(
        0.05, type=float, check=_open_share, help="Bisect until (hi - lo) / lo is at most this."
    )
    budget_ns: int = option(
        3600 * NS_PER_S, flags=("--budget",), help="Wall time of the search; it stops there.", **duration()
    )
    start_factor: float = option(1.0, type=float, check=factor, help="First load factor.")
    max_factor: float = option(64.0, type=float, check=factor, help="Largest load factor tried.")
    max_steps: int = option(DEFAULT_MAX_STEPS, type=int, check=positive, help="Most steps the search runs.")
    sustain_ns: int | None = option(
        None,
        flags=("--sustain",),
        help="Length of the confirming step at the limit [default: 2x --window].",
        **duration(),
    )
    headroom_target: float = option(
        0.7, type=float, check=_headroom_share, help="Operating point as a share of the SLO limit."
    )
    require_headroom: float | None = option(
        None,
        type=float,
        check=factor,
        metavar="X",
        help="Exit 1 when the SLO limit is below X times production's peak minute.",
    )
    gpu_hour_cost: float | None = option(
        None, type=float, check=_money, help="Cost of one GPU hour, for the cost per token."
    )
    gpus: int | None = option(
        None, type=int, check=positive, help="GPUs behind the target, for the cost per token."
    )
    replay: ReplayConfig | None = None

    @property
    def sustain_or_default_ns(self) -> int:
        return self.sustain_ns if self.sustain_ns is not None else 2 * self.window_ns

    def settings(self) -> dict:
        """capacity.json's settings: no API key, header names only."""
        replay = self.replay
        return {
            "trace_path": str(self.trace_path),
            "target_url": replay.target_url,
            "out_dir": str(self.out_dir),
            "slos": [slo.text for slo in self.slos],
            "by": self.by,
            "window_s": self.window_ns / 1e9,
            "warmup_s": self.step_warmup_ns / 1e9,
            "precision": self.precision,
            "budget_s": self.budget_ns / 1e9,
            "start_factor": self.start_factor,
            "max_factor": self.max_factor,
            "max_steps": self.max_steps,
            "sustain_s": self.sustain_or_default_ns / 1e9,
            "headroom_target": self.headroom_target,
            "require_headroom": self.require_headroom,
            "gpu_hour_cost": self.gpu_hour_cost,
            "gpus": self.gpus,
            "max_error_rate": replay.max_error_rate,
            "max_dispatch_lag_ms": replay.limits.max_dispatch_lag_p99_ns / 1e6,
            "workers": replay.workers,
            "max_inflight": replay.max_inflight,
            "api_key_set": replay.api_key is not None,
            "headers": sorted({name for name, _ in replay.sent_headers}),
        }
