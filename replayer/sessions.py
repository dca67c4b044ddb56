"""Sessions as dependency chains: deterministic sharding to workers and linking of turns.

Turn k+1 of a session waits for turn k; sessions never wait for each other, so a whole session
always lives in one worker. Pure functions; no I/O.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import replace

from replayer.schedule import PlannedRequest


def worker_of(session_key: str, workers: int) -> int:
    """The worker that owns a session: stable across runs and machines (CRC32, not hash())."""
    return zlib.crc32(session_key.encode()) % workers


def shard_by_session(requests: Sequence[PlannedRequest], workers: int) -> list[list[PlannedRequest]]:
    shards: list[list[PlannedRequest]] = [[] for _ in range(workers)]
    for plan in requests:
        shards[worker_of(plan.session_key, workers)].append(plan)
    return shards


def link_sessions(requests: Sequence[PlannedRequest]) -> list[PlannedRequest]:
    """Number the plan and chain each session's turns in (turn_index, due time) order.

    A turn that follows another in the plan gets `follows_previous`; the earlier one points at it
    with `next_index`. Input must be sorted by due offset; so is the output.
    """
    indexed = [replace(p, index=i, next_index=None, follows_previous=False) for i, p in enumerate(requests)]
    by_session: dict[str, list[int]] = {}
    for plan in indexed:
        by_session.setdefault(plan.session_key, []).append(plan.index)
    for positions in by_session.values():
        if len(positions) < 2:
            continue
        positions.sort(key=lambda i: (indexed[i].turn_index, indexed[i].scheduled_offset_ns, i))
        for earlier, later in zip(positions, positions[1:], strict=False):
            indexed[earlier] = replace(indexed[earlier], next_index=later)
            indexed[later] = replace(indexed[later], follows_previous=True)
    return indexed


def session_due_ns(scheduled_ns: int, previous_end_ns: int, think_time_ns: int | None) -> int:
    """When a follow-up turn may go: its own schedule, or the previous answer plus think time."""
    return max(scheduled_ns, previous_end_ns + (think_time_ns or 0))
