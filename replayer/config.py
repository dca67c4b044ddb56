"""The one place where replay settings and their defaults live; the CLI only fills it in."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from replayer.compare.gate_limits import MAX_ERROR_RATE, FidelityLimits

ENGINES = ("detect", "vllm", "sglang", "trtllm", "openai")
NS_PER_S = 1_000_000_000


@dataclass(frozen=True, slots=True)
class ScheduleConfig:
    """How the trace's time axis and load are transformed into a schedule (pure planning)."""

    speed: float = 1.0
    scale: float = 1.0
    seed: int = 0
    copy_jitter_ns: int = 1 * NS_PER_S  # copies are shifted by a seeded offset within +-this bound
    from_offset_ns: int | None = None  # window of the trace, from its first arrival
    to_offset_ns: int | None = None
    limit: int | None = None
    max_idle_gap_ns: int | None = None
    cancellations: bool = True


@dataclass(frozen=True, slots=True)
class ReplayConfig:
    """Everything one replay run needs. `api_key` and header values never reach a file."""

    trace_path: str
    target_url: str
    run_dir: str
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)
    workers: int = 1
    max_inflight: int = 10_000  # for the whole run; split evenly between workers
    duration_ns: int | None = None  # stop sending after this long
    grace_ns: int = 30 * NS_PER_S  # after a stop, how long in-flight requests may finish
    engine: str = "detect"
    model: str | None = None  # overrides the trace's model names
    session_header: str | None = None
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    api_key: str | None = field(default=None, repr=False)
    tokenizer: str | None = None
    connect_timeout_ns: int = 30 * NS_PER_S
    read_timeout_ns: int = 600 * NS_PER_S  # longest silence between two reads of one response
    server_metrics_url: str | None = None
    server_metrics_interval_ns: int = 1 * NS_PER_S
    early_wake_ns: int = 1_000_000  # wake this early from the timer, then spin to the deadline
    warm_connections: int = 32  # keep-alive connections per worker, opened before the clock starts
    # the run's own gate, as `report` judges it (replayer.compare.gate_limits)
    limits: FidelityLimits = field(default_factory=FidelityLimits)
    max_error_rate: float = MAX_ERROR_RATE  # failed requests above this share of those sent: exit 1
    start_delay_ns: int = 500_000_000  # between "all workers ready" and offset 0 (connection warm-up)
    quiet: bool = False

    def public_dict(self) -> dict:
        """The configuration for run.json: no API key, header names only (values may be secrets)."""
        data = dataclasses.asdict(self)
        data.pop("api_key")
        data["api_key_set"] = self.api_key is not None
        data["headers"] = sorted({name for name, _ in self.headers})
        return data
