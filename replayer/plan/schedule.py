"""Trace rows -> planned requests with due offsets: window, limit, idle-gap cap, speed, load scale.

Pure functions over columns (numpy arrays, one entry per trace row sorted by arrival); no I/O. A
schedule is columns too, about 50 bytes a planned request: a million requests are planned without
a million objects (replayer.plan.arrays makes a plan readable one at a time, for the loop).
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass, fields

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from llmreplay.durations import format_duration
from llmreplay.errors import BadInput
from llmreplay.trace_format import SCHEDULE_COLUMNS
from replayer.config import ScheduleConfig
from replayer.plan.arrays import NONE, PLAN_COLUMNS, PlanArrays, int64_array
from replayer.plan.phases import Phases, Window, loop_name, loop_span_ns, loops_for, split_copy, trace_window

CANCEL_KIND = "client_disconnected"
MAX_PLANNED_REQUESTS = 100_000_000  # ~50 bytes a plan while planning, more while building bodies
MAX_OFFSET_NS = 1 << 62  # due offsets and think times after --speed stay far inside int64
INPUT_COLUMNS = SCHEDULE_COLUMNS


@dataclass(frozen=True, slots=True)
class ScheduleInput:
    """The trace columns a schedule needs, by trace row (sorted by arrival); NONE where absent."""

    arrival_time_us: np.ndarray
    turn_index: np.ndarray
    think_time_ns: np.ndarray
    stream: np.ndarray  # bool
    cancelled: np.ndarray  # bool: production's client disconnected
    completion_tokens: np.ndarray
    e2e_ns: np.ndarray
    session_keys: pa.Array  # strings: the session id, or `req:<request id>` for a row of its own

    def __len__(self) -> int:
        return len(self.arrival_time_us)


def schedule_input(table: pa.Table) -> ScheduleInput:
    """From a table holding INPUT_COLUMNS (arrival_time as a timestamp or int64 microseconds)."""

    def ints(name: str) -> np.ndarray:
        column = table.column(name)
        if pa.types.is_timestamp(column.type):
            column = column.cast(pa.int64())
        return np.asarray(pc.fill_null(column.cast(pa.int64()), NONE).to_numpy(), dtype=np.int64)

    def flags(column) -> np.ndarray:
        return np.asarray(pc.fill_null(column, False).to_numpy(zero_copy_only=False), dtype=bool)

    session = table.column("session_id")
    keys = pc.if_else(
        pc.is_valid(session), session, pc.binary_join_element_wise("req:", table.column("request_id"), "")
    )
    return ScheduleInput(
        arrival_time_us=ints("arrival_time"),
        turn_index=ints("turn_index"),
        think_time_ns=ints("think_time_ns"),
        stream=flags(table.column("stream")),
        cancelled=flags(pc.equal(table.column("error_kind"), CANCEL_KIND)),
        completion_tokens=ints("completion_tokens"),
        e2e_ns=ints("e2e_ns"),
        session_keys=keys.combine_chunks() if isinstance(keys, pa.ChunkedArray) else keys,
    )


@dataclass(frozen=True, slots=True)
class Schedule:
    """Planned requests by schedule position, sorted by due offset (ties keep trace order)."""

    record_index: np.ndarray  # the trace row (index into the ScheduleInput)
    copy_index: np.ndarray  # 0, or k for copy k of a session (--scale above 1)
    scheduled_offset_ns: np.ndarray
    think_time_ns: np.ndarray  # already divided by speed; NONE: no think time
    cancel_after_tokens: np.ndarray  # NONE unless production's client left after that many tokens
    cancel_after_ns: np.ndarray  # NONE unless it left after that long (no token count)
    idle_removed_ns: int = 0  # time cut out by --max-idle-gap (trace time, before speed)
    trace_span_ns: int = 0  # first to last selected arrival, after gap removal and speed
    source_rows: int = 0  # trace rows in the window, before --scale
    phases: Phases = Phases()  # the warm-up and the --soak loops (replayer.plan.phases)

    def __len__(self) -> int:
        return len(self.record_index)

    def take(self, positions: np.ndarray) -> Schedule:
        """The plans at `positions` (a mask or indices), same totals."""
        columns = {f.name: getattr(self, f.name)[positions] for f in fields(self) if f.name in PLAN_COLUMNS}
        return Schedule(
            **columns,
            idle_removed_ns=self.idle_removed_ns,
            trace_span_ns=self.trace_span_ns,
            source_rows=self.source_rows,
            phases=self.phases,
        )

    def plans(self) -> PlanArrays:
        """The plans as a worker would read them, not linked into sessions."""
        n = len(self)
        return PlanArrays(
            *(int64_array(getattr(self, name)) for name in PLAN_COLUMNS),
            next_index=int64_array(np.full(n, NONE, np.int64)),
            follows_previous=bytes(n),
        )


def _empty() -> Schedule:
    empty = np.empty(0, np.int64)
    return Schedule(*(empty for _ in PLAN_COLUMNS))


def build_schedule(rows: ScheduleInput, config: ScheduleConfig) -> Schedule:
    """Select, compress, scale time and load, add the warm-up and the soak loops; sorted by due offset
    (ties keep trace order). Offset 0 is the warm-up's start (without one, the first request)."""
    _check(config)
    if len(rows) == 0:
        return _empty()
    offsets_ns = (rows.arrival_time_us - rows.arrival_time_us[0]) * 1000
    window = trace_window(config.from_offset_ns, config.to_offset_ns, config.warmup_ns)
    warm, chosen_measured = _selected_rows(offsets_ns, window, config.limit)
    if len(chosen_measured) == 0:
        return _empty()
    chosen = np.concatenate((warm, chosen_measured))
    _refuse_too_many(config.scale, len(chosen))
    zero_ns = window.warm_from_ns if config.warmup_ns else offsets_ns[chosen[0]]
    compressed, removed_ns = compress_idle_gaps(offsets_ns[chosen] - zero_ns, config.max_idle_gap_ns)
    think = rows.think_time_ns[chosen]
    cancel_tokens, cancel_ns = _mirrored_cancels(rows, chosen, config.cancellations)
    due_ns, think_ns = _at_speed(compressed, think, config.speed)
    base = Schedule(
        record_index=chosen,
        copy_index=np.zeros(len(chosen), np.int64),
        scheduled_offset_ns=np.rint(due_ns).astype(np.int64),
        think_time_ns=np.where(think == NONE, NONE, np.rint(think_ns)).astype(np.int64),
        cancel_after_tokens=cancel_tokens,
        cancel_after_ns=cancel_ns,
    )
    scaled = scale_load(base, rows.session_keys, config.scale, config.seed, config.copy_jitter_ns)
    start_ns = round(window.warmup_ns / config.speed) if config.warmup_ns else 0
    first_measured = int(chosen_measured[0])
    looped, phases = soak_loops(scaled, first_measured, start_ns, config)
    phases = dataclasses.replace(
        phases,
        warmup_s=window.warmup_ns / 1e9,
        asked_warmup_s=window.asked_warmup_ns / 1e9,
        measured_from_s=window.measured_from_ns / 1e9,
        measured_to_s=None if window.to_ns is None else window.to_ns / 1e9,
    )
    return _sorted_schedule(looped, phases, removed_ns, len(chosen))


def _selected_rows(
    offsets_ns: np.ndarray, window: Window, limit: int | None
) -> tuple[np.ndarray, np.ndarray]:
    """Indices of the warm-up's rows and of the measured rows (the first `limit` of them) in the
    window, each in trace order."""
    selected = offsets_ns >= window.warm_from_ns
    if window.to_ns is not None:
        selected &= offsets_ns < window.to_ns
    measured = selected & (offsets_ns >= window.measured_from_ns)
    warm = np.flatnonzero(selected & ~measured)
    chosen_measured = np.flatnonzero(measured)
    if limit is not None:
        chosen_measured = chosen_measured[:limit]
    return warm, chosen_measured


def _refuse_too_many(scale: float, rows: int) -> None:
    """Refused (one line) before planning: `scale` times `rows` plans over MAX_PLANNED_REQUESTS."""
    if scale * rows > MAX_PLANNED_REQUESTS:
        raise BadInput(
            f"--scale {scale:g}: would plan about {scale * rows:,.0f} requests from "
            f"{rows:,} rows (at most {MAX_PLANNED_REQUESTS:,} fit in memory); lower --scale or cut the window"
        )


def _mirrored_cancels(
    rows: ScheduleInput, chosen: np.ndarray, cancellations: bool
) -> tuple[np.ndarray, np.ndarray]:
    """Each chosen row's cancel point (NONE: none): its output tokens when streamed with some, else
    its elapsed time; all NONE without --cancellations."""
    cancel_tokens = np.full(len(chosen), NONE, np.int64)
    cancel_ns = np.full(len(chosen), NONE, np.int64)
    if cancellations:
        # The user saw N tokens and left: mirror the token count when known, else the elapsed time.
        cancelled = rows.cancelled[chosen]
        tokens = rows.completion_tokens[chosen]
        by_tokens = cancelled & rows.stream[chosen] & (tokens > 0)
        e2e = rows.e2e_ns[chosen]
        by_time = cancelled & ~by_tokens & (e2e > 0)
        cancel_tokens[by_tokens] = tokens[by_tokens]
        cancel_ns[by_time] = e2e[by_time]
    return cancel_tokens, cancel_ns


def _at_speed(compressed: np.ndarray, think: np.ndarray, speed: float) -> tuple[np.ndarray, np.ndarray]:
    """Due offsets and think times (0 for NONE) divided by --speed, as floats; refused (one line)
    when either goes beyond int64 nanoseconds."""
    with np.errstate(over="ignore"):  # a tiny --speed: infinite offsets, refused just below
        due_ns = compressed / speed
        think_ns = np.where(think == NONE, 0, think) / speed
    longest = max(float(due_ns.max()), float(think_ns.max()))
    if longest > MAX_OFFSET_NS:  # beyond int64 nanoseconds: replay.plan_bounds would never see it
        raise BadInput(
            f"--speed {speed:g}: the schedule would span {_span_text(longest)}; "
            "cut it with --max-idle-gap, --to or a higher --speed"
        )
    return due_ns, think_ns


def _sorted_schedule(looped: Schedule, phases: Phases, removed_ns: int, source_rows: int) -> Schedule:
    """The plans sorted by due offset (a stable sort: ties keep trace order), with the span of their
    due offsets and the facts of how they were made."""
    order = np.argsort(looped.scheduled_offset_ns, kind="stable")
    due = looped.scheduled_offset_ns
    span = int(due.max() - due.min()) if len(due) else 0
    sorted_plans = looped.take(order)
    return Schedule(
        **{name: getattr(sorted_plans, name) for name in PLAN_COLUMNS},
        idle_removed_ns=removed_ns,
        trace_span_ns=span,
        source_rows=source_rows,
        phases=phases,
    )


def soak_loops(
    scaled: Schedule, first_measured: int, start_ns: int, config: ScheduleConfig
) -> tuple[Schedule, Phases]:
    """Without --soak the schedule as it is; with it, the measured plans again and again, loop k
    shifted by k loop spans and its copies numbered `k * stride + copy`, cut at the soak's end."""
    phases = Phases(
        measured_start_offset_s=start_ns / 1e9,
        first_measured_record=first_measured,
        soak_keep_sharing=config.soak_keep_sharing,
    )
    if config.soak_ns is None:
        return scaled, phases
    measured = np.flatnonzero(scaled.record_index >= first_measured)
    span = loop_span_ns(scaled.scheduled_offset_ns[measured])
    loops = loops_for(config.soak_ns, span)
    stride = int(scaled.copy_index.max()) + 1
    if loops * len(measured) > MAX_PLANNED_REQUESTS:
        raise BadInput(
            f"--soak {format_duration(config.soak_ns)}: {loops:,} loops of {len(measured):,} requests would plan more "
            f"than {MAX_PLANNED_REQUESTS:,}; shorten --soak or lengthen the window"
        )
    pieces = [scaled]
    for loop in range(1, loops):
        again = scaled.take(measured)
        pieces.append(
            dataclasses.replace(
                again,
                copy_index=again.copy_index + loop * stride,
                scheduled_offset_ns=again.scheduled_offset_ns + loop * span,
            )
        )
    columns = {name: np.concatenate([getattr(p, name) for p in pieces]) for name in PLAN_COLUMNS}
    keep = columns["scheduled_offset_ns"] < start_ns + config.soak_ns  # the warm-up lies before it
    looped = Schedule(**{name: values[keep] for name, values in columns.items()})
    soak = dataclasses.replace(
        phases, loop_stride=stride, loop_span_s=span / 1e9, soak_s=config.soak_ns / 1e9, loops_planned=loops
    )
    return looped, soak


def _check(config: ScheduleConfig) -> None:
    if not (config.speed > 0 and math.isfinite(config.speed)):
        raise BadInput(f"--speed {config.speed}: must be a finite number greater than 0")
    if not (config.scale > 0 and math.isfinite(config.scale)):
        raise BadInput(f"--scale {config.scale}: must be a finite number greater than 0")
    if config.limit is not None and config.limit < 1:
        raise BadInput(f"--limit {config.limit}: must be at least 1")
    if config.max_idle_gap_ns is not None and config.max_idle_gap_ns < 0:
        raise BadInput("--max-idle-gap: must not be negative")
    if config.soak_keep_sharing and config.soak_ns is None:
        raise BadInput("--soak-keep-sharing: only with --soak (it says what each soak loop sends)")
    if config.from_offset_ns is not None and config.to_offset_ns is not None:
        if config.to_offset_ns <= config.from_offset_ns:
            raise BadInput("--to: must be later than --from")


def compress_idle_gaps(offsets_ns: np.ndarray, max_gap_ns: int | None) -> tuple[np.ndarray, int]:
    """Shorten every gap between consecutive arrivals to at most `max_gap_ns`; returns the time removed."""
    offsets_ns = np.asarray(offsets_ns, dtype=np.int64)
    if max_gap_ns is None or len(offsets_ns) == 0:
        return offsets_ns, 0
    gaps = np.diff(offsets_ns)
    removed = np.concatenate(([0], np.cumsum(np.where(gaps > max_gap_ns, gaps - max_gap_ns, 0))))
    return offsets_ns - removed, int(removed[-1])


def copy_name(name: str, copy_index: int) -> str:
    """A request id or session key of copy k of a session (`#c<k>`; copy 0 keeps the original)."""
    return name if copy_index == 0 else f"{name}#c{copy_index}"


def sent_name(name: str, plan_copy: int, loop_stride: int) -> str:
    """The id a plan is sent and recorded under: its copy's `#c<k>`, then its soak loop's `#l<k>`."""
    loop, copy = split_copy(plan_copy, loop_stride)
    return loop_name(copy_name(name, copy), loop)


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


def scale_load(base: Schedule, session_keys: pa.Array, scale: float, seed: int, bound_ns: int) -> Schedule:
    """Sample or copy whole sessions; copy k of a session is shifted as a block (and named `#c<k>`).

    Copies follow their original in plan order. The session keys of the planned rows are held as
    strings for the while (hashing needs them): --scale costs some memory while planning."""
    if scale == 1.0:
        return base
    keys = session_keys.take(pa.array(base.record_index)).to_pylist()
    per_session = copies_per_session(keys, scale, seed)
    counts = np.fromiter((per_session[key] for key in keys), np.int64, len(keys))
    source = np.repeat(np.arange(len(keys)), counts)
    starts = np.repeat(np.cumsum(counts) - counts, counts)
    copy_index = np.arange(len(source)) - starts
    offsets = base.scheduled_offset_ns[source].copy()
    for position in np.flatnonzero(copy_index).tolist():
        jitter = copy_jitter_ns(seed, keys[source[position]], int(copy_index[position]), bound_ns)
        offsets[position] = max(0, int(offsets[position]) + jitter)
    copies = base.take(source)
    return Schedule(
        record_index=copies.record_index,
        copy_index=copy_index,
        scheduled_offset_ns=offsets,
        think_time_ns=copies.think_time_ns,
        cancel_after_tokens=copies.cancel_after_tokens,
        cancel_after_ns=copies.cancel_after_ns,
    )


def _span_text(ns: float) -> str:
    """A span past MAX_OFFSET_NS for a message: in years while that is a readable number."""
    if not ns < 1e26:  # inf and nan included: about 3 billion years
        return "more than a billion years"
    return format_duration(round(ns))
