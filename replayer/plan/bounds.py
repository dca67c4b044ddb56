"""What a replay can send in reasonable time and memory, checked before any body is built.

Plans due at or after --duration are dropped (never built); a schedule longer than
MAX_SCHEDULE_SPAN_NS or a prompt larger than MAX_PROMPT_TOKENS is refused with one line saying why.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from llmreplay.durations import format_duration
from llmreplay.errors import BadInput
from replayer.plan.arrays import NONE
from replayer.plan.request_builder import MAX_PROMPT_TOKENS
from replayer.plan.schedule import Schedule

MAX_SCHEDULE_SPAN_NS = 31 * 86_400 * 10**9  # a month of sending: beyond it, the trace needs a cut


def within_duration(plans: Schedule, duration_ns: int | None) -> tuple[Schedule, int]:
    """The plans due before `duration_ns` (a session's later turn is never due before its
    scheduled offset), and how many were dropped."""
    if duration_ns is None:
        return plans, 0
    keep = plans.scheduled_offset_ns < duration_ns
    dropped = int(len(plans) - keep.sum())
    return (plans.take(keep) if dropped else plans), dropped


def check_span(plans: Schedule, duration_ns: int | None, trace_path: str) -> None:
    """Refuse a schedule that would take longer than MAX_SCHEDULE_SPAN_NS to send (after --speed
    and --max-idle-gap), naming the longest wait; --duration bounds it as well."""
    if not len(plans):
        return
    offsets = plans.scheduled_offset_ns
    think = plans.think_time_ns[plans.think_time_ns != NONE]
    longest_think = int(think.max()) if len(think) else 0
    span = int(offsets.max()) + longest_think  # the last send, at the latest (one think time counted)
    if (span if duration_ns is None else min(span, duration_ns)) <= MAX_SCHEDULE_SPAN_NS:
        return
    gaps = np.diff(np.sort(offsets)) if len(offsets) > 1 else np.zeros(1, np.int64)
    gap, where = int(gaps.max()), "between two arrivals"
    if longest_think > gap:
        gap, where = longest_think, "of think time in a session"
    raise BadInput(
        f"{trace_path}: the schedule spans {format_duration(span)} (longest wait {format_duration(gap)} "
        f"{where}), more than {format_duration(MAX_SCHEDULE_SPAN_NS)}: cut it with --max-idle-gap, "
        "--speed, --to or --duration"
    )


def check_prompt_sizes(table: pa.Table, planned_rows: np.ndarray, trace_path: str) -> None:
    """Refuse a planned row whose prompt no engine takes and whose body would not fit in memory."""
    tokens = table.column("prompt_tokens").take(pa.array(planned_rows, pa.int64()))
    too_big = pc.fill_null(pc.greater(tokens, MAX_PROMPT_TOKENS), False)
    if not pc.any(too_big).as_py():
        return
    position = pc.index(too_big, True).as_py()
    row = int(planned_rows[position])
    request = table.column("request_id")[row].as_py()
    raise BadInput(
        f"{trace_path}: request {request}: a prompt of {tokens[position].as_py():,} tokens cannot be replayed "
        f"(at most {MAX_PROMPT_TOKENS:,}: no engine takes more, and its body would not fit in memory)"
    )
