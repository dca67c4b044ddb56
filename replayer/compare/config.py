"""Compare's and report's settings: each field's default, flag, help and check, declared once.

Light (no numpy, no pyarrow): both commands build their flags from it, and `--help` stays fast.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from llmreplay.options import duration, option, share
from replayer.judge.gate_limits import (
    BOOTSTRAP_DRAWS,
    BOOTSTRAP_SEED,
    CONFIDENCE,
    ERROR_RATE_TOLERANCE,
    FidelityLimits,
    max_error_rate_field,
    slos_field,
)

REPORT_FIELDS = frozenset(  # report has no baseline
    {"slos", "max_dispatch_lag_p99_ns", "max_cached_share_difference", "max_error_rate"}
)


@dataclass(frozen=True, slots=True)
class CellSettings:
    tolerance: float
    confidence: float  # per interval (Bonferroni over the comparison's cells)
    draws: int
    refused: bool = False  # the sides ran at different load: numbers shown, no verdict
    block_requests: int = 1  # consecutive requests resampled together (replayer.judge.time_blocks)


def per_interval_confidence(family_confidence: float, intervals: int) -> float:
    """Bonferroni: each of `intervals` CIs at this level keeps the family-wise error at 1 - family_confidence.

    Sixteen verdicts at 95 % each would call noise a regression far more often than 1 time in 20.
    """
    return 1.0 - (1.0 - family_confidence) / max(1, intervals)


@dataclass(frozen=True, slots=True)
class CompareConfig:
    """Everything that shapes a comparison; the CLI fills it, defaults live here only."""

    tolerance: float = option(
        0.10, help="Change a percentile may show before it counts.", **share()
    )  # relative change of a latency percentile
    error_rate_tolerance: float = option(
        ERROR_RATE_TOLERANCE,
        help="Error-rate increase over the baseline's (in points) that a significant rise must exceed to fail.",
        **share(),
    )
    max_error_rate: float = max_error_rate_field()  # the candidate's (or the run's) error share
    slos: tuple = slos_field(
        "Per-request and percentile SLO, repeatable: ttft_p95<=500ms, tpot_p99<=50ms, e2e_p99<=20s."
    )
    offset_ttft_ns: int = option(
        0,
        flags=("--offset-ttft",),
        help="Subtract a measured network difference from the candidate's TTFT and E2E (e.g. 3ms).",
        **duration(allow_negative=True, allow_zero=True, bare_unit=None),
    )
    limits: FidelityLimits = field(default_factory=FidelityLimits)
    allow_different_load: bool = option(
        False,
        flag_value=True,
        help="Judge latency even when the sides ran at different --speed/--scale (refused by default, exit 1).",
    )
    allow_different_api: bool = option(
        False,
        flag_value=True,
        help="Compare sides sent to different APIs (chat, Responses, Messages); refused by default (exit 2).",
    )
    fail_on_inconclusive: bool = option(
        False,
        flag_value=True,
        help="A strict gate: an inconclusive latency or error-rate verdict fails too (exit 1).",
    )
    confidence: float = CONFIDENCE  # family-wise, over the metric x percentile verdicts
    seed: int = BOOTSTRAP_SEED
    draws: int = BOOTSTRAP_DRAWS

    @property
    def interval_confidence(self) -> float:
        from llmreplay.metrics import JUDGED_CELLS

        return per_interval_confidence(self.confidence, JUDGED_CELLS)

    def cells(self, refused: bool = False):
        return CellSettings(self.tolerance, self.interval_confidence, self.draws, refused)
