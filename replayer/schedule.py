"""Trace rows -> planned requests with due offsets: window, limit, idle-gap cap, speed, load scale.

Pure functions over TraceRecord sequences (sorted by arrival, as read_trace returns them); no I/O.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from llmreplay.errors import BadInput
from replayer.config import ScheduleConfig

if TYPE_CHECKING:  # workers unpickle PlannedRequest: importing this module must not load pyarrow
    from llmreplay.trace_format import TraceRecord

CANCEL_KIND = "client_disconnected"


@dataclass(frozen=True, slots=True)
class PlannedRequest:
    """One request to send. `next_index` chains the turns of a session inside one worker's plan."""

    request_id: str  # sent as X-Request-Id; copies get a `#c<k>` suffix
    source_request_id: str
    copy_index: int
    record_index: int  # into the records the schedule was built from
    session_key: str  # session id (with copy suffix) or, for session-less rows, the request id
    turn_index: int
    scheduled_offset_ns: int
    think_time_ns: int | None  # already divided by speed
    cancel_after_tokens: int | None = None
    cancel_after_ns: int | None = None
    index: int = -1  # position in the worker's plan
    next_index: int | None = None
    follows_previous: bool = False  # waits for the previous turn of its session


@dataclass(frozen=True, slots=True)
class Schedule:
    requests: tuple[PlannedRequest, ...]
    idle_removed_ns: int  # time cut out by --max-idle-gap (trace time, before speed)
    trace_span_ns: int  # first to last selected arrival, after gap removal and speed
    source_rows: int  # trace rows in the window, before --scale


def build_schedule(records: Sequence[TraceRecord], config: ScheduleConfig) -> Schedule:
    """Select, compress, scale time and load; result sorted by due offset (ties keep trace order)."""
    _check(config)
    if not records:
        return Schedule((), 0, 0, 0)
    origin_us = records[0].arrival_time_us
    offsets_ns = [(r.arrival_time_us - origin_us) * 1000 for r in records]
    chosen = [i for i, off in enumerate(offsets_ns) if _in_window(off, config)]
    if config.limit is not None:
        chosen = chosen[: config.limit]
    if not chosen:
        return Schedule((), 0, 0, 0)
    window_offsets = [offsets_ns[i] - offsets_ns[chosen[0]] for i in chosen]
    compressed, removed_ns = compress_idle_gaps(window_offsets, config.max_idle_gap_ns)
    base = [
        _plan_one(records[i], i, round(off / config.speed), config)
        for i, off in zip(chosen, compressed, strict=True)
    ]
    scaled = scale_load(base, config.scale, config.seed, config.copy_jitter_ns)
    scaled.sort(key=lambda p: p.scheduled_offset_ns)
    span = scaled[-1].scheduled_offset_ns - scaled[0].scheduled_offset_ns if scaled else 0
    return Schedule(tuple(scaled), removed_ns, span, len(base))


def _check(config: ScheduleConfig) -> None:
    if not config.speed > 0:
        raise BadInput(f"--speed {config.speed}: must be greater than 0")
    if not config.scale > 0:
        raise BadInput(f"--scale {config.scale}: must be greater than 0")
    if config.limit is not None and config.limit < 1:
        raise BadInput(f"--limit {config.limit}: must be at least 1")
    if config.max_idle_gap_ns is not None and config.max_idle_gap_ns < 0:
        raise BadInput("--max-idle-gap: must not be negative")
    if config.from_offset_ns is not None and config.to_offset_ns is not None:
        if config.to_offset_ns <= config.from_offset_ns:
            raise BadInput("--to: must be later than --from")


def _in_window(offset_ns: int, config: ScheduleConfig) -> bool:
    if config.from_offset_ns is not None and offset_ns < config.from_offset_ns:
        return False
    return config.to_offset_ns is None or offset_ns < config.to_offset_ns


def compress_idle_gaps(offsets_ns: Sequence[int], max_gap_ns: int | None) -> tuple[list[int], int]:
    """Shorten every gap between consecutive arrivals to at most `max_gap_ns`; returns the time removed."""
    if max_gap_ns is None or not offsets_ns:
        return list(offsets_ns), 0
    out = [offsets_ns[0]]
    removed = 0
    for previous, current in zip(offsets_ns, offsets_ns[1:], strict=False):
        gap = current - previous
        cut = gap - max_gap_ns if gap > max_gap_ns else 0
        removed += cut
        out.append(current - removed)
    return out, removed


def _plan_one(record: TraceRecord, index: int, offset_ns: int, config: ScheduleConfig) -> PlannedRequest:
    cancel_tokens = cancel_ns = None
    if config.cancellations and record.error_kind == CANCEL_KIND:
        # The user saw N tokens and left: mirror the token count when known, else the elapsed time.
        if record.stream and record.completion_tokens:
            cancel_tokens = record.completion_tokens
        elif record.e2e_ns:
            cancel_ns = record.e2e_ns
    think = None if record.think_time_ns is None else round(record.think_time_ns / config.speed)
    return PlannedRequest(
        request_id=record.request_id,
        source_request_id=record.request_id,
        copy_index=0,
        record_index=index,
        session_key=record.session_id if record.session_id is not None else f"req:{record.request_id}",
        turn_index=record.turn_index,
        scheduled_offset_ns=offset_ns,
        think_time_ns=think,
        cancel_after_tokens=cancel_tokens,
        cancel_after_ns=cancel_ns,
    )


def unit_hash(seed: int, key: str, salt: str = "") -> int:
    """A stable 64-bit hash of a session key: the basis of every deterministic sampling choice."""
    digest = hashlib.blake2b(f"{seed}\x00{salt}\x00{key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little")


def copies_per_session(session_keys: Sequence[str], scale: float, seed: int) -> dict[str, int]:
    """How many times each session is sent: exactly round(scale * sessions) sessions in total.

    Whole copies go to every session; the fractional rest goes to the sessions ranking first by
    seeded hash, so `--scale 0.5` keeps exactly half the sessions and `--scale 2` doubles them.
    """
    unique = list(dict.fromkeys(session_keys))
    whole = int(scale)
    extra = round((scale - whole) * len(unique))
    ranked = sorted(unique, key=lambda key: unit_hash(seed, key))
    lucky = set(ranked[:extra])
    return {key: whole + (key in lucky) for key in unique}


def copy_jitter_ns(seed: int, session_key: str, copy_index: int, bound_ns: int) -> int:
    """Seeded offset in [-bound, +bound] for copy k >= 1 of a session (copy 0 is never moved)."""
    if copy_index == 0 or bound_ns == 0:
        return 0
    h = unit_hash(seed, session_key, f"jitter{copy_index}")
    return h % (2 * bound_ns + 1) - bound_ns


def scale_load(base: list[PlannedRequest], scale: float, seed: int, bound_ns: int) -> list[PlannedRequest]:
    """Sample or copy whole sessions; copy k of a session is shifted as a block and renamed `#c<k>`."""
    if scale == 1.0:
        return list(base)
    counts = copies_per_session([p.session_key for p in base], scale, seed)
    out: list[PlannedRequest] = []
    for plan in base:
        for k in range(counts[plan.session_key]):
            if k == 0:
                out.append(plan)
                continue
            jitter = copy_jitter_ns(seed, plan.session_key, k, bound_ns)
            out.append(
                replace(
                    plan,
                    request_id=f"{plan.request_id}#c{k}",
                    copy_index=k,
                    session_key=f"{plan.session_key}#c{k}",
                    scheduled_offset_ns=max(0, plan.scheduled_offset_ns + jitter),
                )
            )
    return out
