"""The gate's limits and their flags, declared once: `replay`, `report` and `compare` all read them here.

Light on purpose (no numpy, no pyarrow): replayer.config imports it.
"""

from __future__ import annotations

from dataclasses import dataclass

from llmreplay.options import duration, option, share

BOOTSTRAP_DRAWS = 10_000  # cheap: each replicate is O(1) (see stats.bootstrap_quantile)
BOOTSTRAP_SEED = 20240607
CONFIDENCE = 0.95  # family-wise, over a comparison's judged latency cells
MAX_ERROR_RATE = 0.01  # engine errors / requests counted, above it a run fails the gate
ERROR_RATE_TOLERANCE = 0.01  # candidate - baseline error share that a significant increase must exceed
DEFAULT_MAX_DISPATCH_LAG_NS = 5_000_000
DEFAULT_MAX_CACHED_SHARE_DIFFERENCE = 0.02  # prefix-cache hit share, absolute (2 points)


@dataclass(frozen=True, slots=True)
class FidelityLimits:
    """What a replay must achieve for its latencies to mean anything."""

    max_unsent_share: float = 0.01  # shed by --max-inflight, or never sent (interrupted)
    max_dispatch_lag_p99_ns: int = option(
        DEFAULT_MAX_DISPATCH_LAG_NS,
        flags=("--max-dispatch-lag",),
        help="Fidelity limit: dispatch lag p99 (actual send - scheduled send) above this makes the "
        "replay unfaithful, exit 1.",
        **duration(bare_unit=None),  # seconds and milliseconds are both plausible: the unit is required
    )
    max_arrival_error_p99_ms: float = 100.0
    max_output_token_error_p90: float = 0.05  # relative, per request
    max_input_token_error_p90: float = 0.10
    max_mix_difference: float = 0.02  # stream and tool shares, absolute
    max_cached_share_difference: float = option(
        DEFAULT_MAX_CACHED_SHARE_DIFFERENCE,
        help="Fidelity limit: cached prompt tokens / prompt tokens differing from the other side's "
        "(production's, or the baseline's) by more than this makes the replay unfaithful, exit 1 "
        "(100% turns it off).",
        **share(allow_all=True),
    )


def slos_field(help_text: str):
    """The repeatable `--slo` field (ttft_p95<=500ms); `help_text` says what the command judges with it."""
    return option((), flags=("--slo",), multiple=True, metavar="SLO", parse=_parse_slos, help=help_text)


def _parse_slos(texts: tuple[str, ...], flag: str) -> tuple:
    from replayer.judge.slo import parse_slo  # numpy: not at the CLI's start

    return tuple(parse_slo(text) for text in texts)


def max_error_rate_field():
    """The `--max-error-rate` field of a config that gates on errors (replay, compare, report)."""
    return option(
        MAX_ERROR_RATE,
        help="Failed requests (4xx, 5xx, broken streams, timeouts) above this share of those sent fail "
        "the gate, exit 1 (100% turns it off).",
        **share(allow_all=True),
    )
