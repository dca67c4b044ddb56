"""Sessions as dependency chains: turn k+1 waits for turn k, sessions never wait for each other, so a
whole session lives in one worker (deterministic sharding). Pure functions over a Schedule's columns;
numpy is imported inside the planning functions, as workers import `session_due_ns`."""

from __future__ import annotations

import zlib
from typing import TYPE_CHECKING

from replayer.plan.arrays import NONE, PlanArrays, int64_array

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa

    from replayer.plan.schedule import Schedule

CRC_SLICE_ROWS = 65_536  # session keys become Python strings this many at a time


def worker_of(session_key: str, workers: int) -> int:
    """The worker that owns a session: stable across runs and machines (CRC32, not hash())."""
    return zlib.crc32(session_key.encode()) % workers


def shard_by_session(schedule: Schedule, session_keys: pa.Array, workers: int) -> list[np.ndarray]:
    """Schedule positions of each worker's plans, in schedule order: `worker_of` each plan's session
    key (with its copy's `#c<k>`), computed from one CRC per trace row."""
    import numpy as np

    row_crc = np.empty(len(session_keys), np.int64)
    for at in range(0, len(session_keys), CRC_SLICE_ROWS):
        keys = session_keys.slice(at, CRC_SLICE_ROWS).to_pylist()
        row_crc[at : at + len(keys)] = [zlib.crc32(key.encode()) for key in keys]
    crc = row_crc[schedule.record_index]
    for position in np.flatnonzero(schedule.copy_index).tolist():  # crc32 of key + "#c<k>", continued
        crc[position] = zlib.crc32(f"#c{schedule.copy_index[position]}".encode(), int(crc[position]))
    owner = crc % workers
    return [np.flatnonzero(owner == worker) for worker in range(workers)]


def link_sessions(
    schedule: Schedule, positions: np.ndarray, session_codes: np.ndarray, turn_index: np.ndarray
) -> PlanArrays:
    """One worker's plans (the schedule at `positions`, sorted by due offset), each session's turns
    chained in (turn_index, due time) order: a turn that follows another in the plan gets
    `follows_previous`; the earlier one points at it with `next_index`.

    `session_codes`, `turn_index`: by trace row; equal codes mean the same session key."""
    import numpy as np

    plans = schedule.take(positions)
    records = plans.record_index
    code, copy = session_codes[records], plans.copy_index
    local = np.arange(len(records))
    order = np.lexsort((local, plans.scheduled_offset_ns, turn_index[records], copy, code))
    same = (code[order][1:] == code[order][:-1]) & (copy[order][1:] == copy[order][:-1])
    earlier, later = order[:-1][same], order[1:][same]
    next_index = np.full(len(records), NONE, np.int64)
    next_index[earlier] = later
    follows = np.zeros(len(records), np.uint8)
    follows[later] = 1
    return PlanArrays(
        int64_array(records),
        int64_array(copy),
        int64_array(plans.scheduled_offset_ns),
        int64_array(plans.think_time_ns),
        int64_array(plans.cancel_after_tokens),
        int64_array(plans.cancel_after_ns),
        int64_array(next_index),
        follows.tobytes(),
    )


def session_codes(session_ids: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """An integer per trace row, equal for the rows of one session (for link_sessions); a row without
    a session id is a session of its own. Only the session ids are dictionary-encoded, so a trace
    without sessions costs 8 bytes a row here."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(session_ids, pa.ChunkedArray):  # one dictionary for all rows
        session_ids = session_ids.combine_chunks()
    indices = pc.dictionary_encode(session_ids).indices
    codes = np.array(pc.fill_null(indices.cast(pa.int64()), -1).to_numpy(), dtype=np.int64)  # a writable copy
    alone = np.flatnonzero(codes < 0)
    codes[alone] = -1 - alone
    return codes


def session_due_ns(scheduled_ns: int, previous_end_ns: int, think_time_ns: int | None) -> int:
    """When a follow-up turn may go: its own schedule, or the previous answer plus think time."""
    return max(scheduled_ns, previous_end_ns + (think_time_ns or 0))
