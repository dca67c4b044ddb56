"""When offset 0 of a run is: soon (one host), at --start-at, or when --start-barrier releases every shard;
a wall-clock start converted once to the monotonic clock the workers pace on, the host clock read around it.
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass

from llmreplay.errors import BadInput
from replayer.config import START_AT_PAST_NS, MultiHostConfig
from replayer.launch.host_clock import clock_report, wall_ns

LATE_TOLERANCE_NS = START_AT_PAST_NS  # a shared start this far past already: the host would start behind the others


@dataclass(frozen=True, slots=True)
class Armed:
    start_mono_ns: int  # time.perf_counter_ns() of offset 0
    start_unix_ns: int
    clock_arm: dict | None  # replayer.launch.host_clock.clock_report, for a multi-host run


def arm_start(multihost: MultiHostConfig, start_delay_ns: int) -> Armed:
    """Offset 0 of the run: `start_delay_ns` from now, or the shared start (waiting at the barrier)."""
    if multihost.start_barrier is None and multihost.start_at_ns is None:
        mono, wall = _clock_pair()
        return Armed(mono + start_delay_ns, wall + start_delay_ns, None)
    clock_arm = clock_report(_time_url(multihost))
    if multihost.start_barrier is not None:
        shard, shards = multihost.shard or (0, 1)
        from replayer.launch.barrier import await_start

        start_unix_ns = await_start(
            multihost.start_barrier, shard, shards, socket.gethostname(), multihost.barrier_timeout_ns
        )
    else:
        start_unix_ns = multihost.start_at_ns
    mono, wall = _clock_pair()
    if start_unix_ns < wall - LATE_TOLERANCE_NS:
        flag = "--start-barrier" if multihost.start_barrier else "--start-at"
        raise BadInput(
            f"{flag}: the shared start was {(wall - start_unix_ns) / 1e9:.3f} s ago; this host is too late"
        )
    return Armed(mono + (start_unix_ns - wall), start_unix_ns, clock_arm)


def end_clock(multihost: MultiHostConfig, clock_arm: dict | None) -> dict | None:
    """The clock at arm and now, for run.json; tells the barrier this shard is done."""
    if clock_arm is None:
        return None
    clock = {"arm": clock_arm, "end": clock_report(_time_url(multihost))}
    if multihost.start_barrier is not None:
        from replayer.launch.barrier import report_done

        shard, shards = multihost.shard or (0, 1)
        report_done(multihost.start_barrier, shard, shards, socket.gethostname())
    return clock


def _time_url(multihost: MultiHostConfig) -> str | None:
    return None if multihost.start_barrier is None else multihost.start_barrier.rstrip("/") + "/time"


def _clock_pair() -> tuple[int, int]:
    """The monotonic and wall clocks read together (the tighter of two tries)."""
    best = None
    for _ in range(2):
        before = time.perf_counter_ns()
        wall = wall_ns()
        after = time.perf_counter_ns()
        if best is None or after - before < best[2]:
            best = ((before + after) // 2, wall, after - before)
    return best[0], best[1]
