"""Planned requests as columns of the array module (~60 bytes a request, no numpy: workers load it),
read one at a time through small views; ids and session keys follow from the trace row and the copy
index. Why not objects: docs/design/replay-memory.md."""

from __future__ import annotations

from array import array

NONE = -1  # an absent value in a column
# What a schedule plans for each request (replayer.plan.schedule.Schedule's columns, by these names) ...
PLAN_COLUMNS = (
    "record_index",
    "copy_index",
    "scheduled_offset_ns",
    "think_time_ns",
    "cancel_after_tokens",
    "cancel_after_ns",
)
# ... and what linking a worker's plans into sessions adds (replayer.plan.sessions.link_sessions).
LINK_COLUMNS = ("next_index", "follows_previous")


class PlannedRequest:
    """One planned request, read from its columns: what the loop, the builder and the merge need."""

    __slots__ = ("index", *PLAN_COLUMNS, *LINK_COLUMNS)

    def __init__(self, plans: PlanArrays, index: int):
        self.index = index
        self.record_index = plans.record_index[index]
        self.copy_index = plans.copy_index[index]
        self.scheduled_offset_ns = plans.scheduled_offset_ns[index]
        self.think_time_ns = _value(plans.think_time_ns[index])
        self.cancel_after_tokens = _value(plans.cancel_after_tokens[index])
        self.cancel_after_ns = _value(plans.cancel_after_ns[index])
        self.next_index = _value(plans.next_index[index])
        self.follows_previous = bool(plans.follows_previous[index])


def _value(stored: int) -> int | None:
    return None if stored == NONE else stored


class PlanArrays:
    """Plans by plan index, as columns; for a worker, linked into sessions (replayer.plan.sessions)."""

    __slots__ = (*PLAN_COLUMNS, *LINK_COLUMNS)

    def __init__(
        self,
        record_index: array,
        copy_index: array,
        scheduled_offset_ns: array,
        think_time_ns: array,
        cancel_after_tokens: array,
        cancel_after_ns: array,
        next_index: array,
        follows_previous: bytes,
    ):
        self.record_index = record_index
        self.copy_index = copy_index
        self.scheduled_offset_ns = scheduled_offset_ns
        self.think_time_ns = think_time_ns  # NONE: none
        self.cancel_after_tokens = cancel_after_tokens
        self.cancel_after_ns = cancel_after_ns
        self.next_index = next_index  # NONE: the session's last turn in this worker
        self.follows_previous = follows_previous  # 1: sent after the previous turn's answer

    def __getstate__(self):
        return tuple(getattr(self, name) for name in self.__slots__)

    def __setstate__(self, state) -> None:
        for name, value in zip(self.__slots__, state, strict=True):
            setattr(self, name, value)

    def __len__(self) -> int:
        return len(self.record_index)

    def __getitem__(self, index: int) -> PlannedRequest:
        count = len(self.record_index)
        if index < 0:
            index += count
        if not 0 <= index < count:
            raise IndexError(index)
        return PlannedRequest(self, index)

    def heads(self) -> HeadPlans:
        """The plans sent on schedule (not after a previous turn), in plan order."""
        return HeadPlans(self)


def int64_array(values) -> array:
    """An array("q") of a C-contiguous int64 buffer (a numpy array from the coordinator)."""
    out = array("q")
    out.frombytes(memoryview(values).cast("B"))
    return out


class HeadPlans:
    """The session heads of a PlanArrays as a sequence; the last view is reused (the dispatcher
    reads the next head's deadline several times before sending it)."""

    __slots__ = ("_plans", "_indices", "_last")

    def __init__(self, plans: PlanArrays):
        self._plans = plans
        self._indices = array("q", (i for i, follows in enumerate(plans.follows_previous) if not follows))
        self._last: PlannedRequest | None = None

    def __len__(self) -> int:
        return len(self._indices)

    def __getitem__(self, position: int) -> PlannedRequest:
        index = self._indices[position]
        last = self._last
        if last is None or last.index != index:
            last = self._last = PlannedRequest(self._plans, index)
        return last
