"""A schedule's sessions split across N replay hosts: whole sessions per host (turns, think times and
affinity stay together), packed greedily so each host's busiest second is as low as it can be made.

Deterministic from the schedule, N and the seed: every host computes the same split on its own.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np

from replayer.plan.schedule import Schedule
from replayer.plan.sessions import session_codes

NS_PER_S = 1_000_000_000
# One host's measured ceiling (docs/benchmarks.md: 150 req/s of long streams per core, lag p99 2.6 ms).
HOST_REQUESTS_PER_S_PER_CORE = 150


@dataclass(frozen=True, slots=True)
class ShardPlan:
    """Which host sends each planned request, and what each host's load will look like."""

    shards: int
    shard_of: np.ndarray  # by schedule position
    sessions: tuple[int, ...]  # per shard
    requests: tuple[int, ...]
    peak_per_s: tuple[int, ...]  # the busiest one-second bucket of each shard's due times

    def positions(self, shard: int) -> np.ndarray:
        """Schedule positions of one shard's plans, in schedule order."""
        return np.flatnonzero(self.shard_of == shard)

    def as_dict(self, cores_per_host: int | None = None) -> dict:
        """The plan as plan.json and run.json carry it; with `cores_per_host`, each shard's expected
        peak against one host's measured ceiling."""
        out = {
            "shards": self.shards,
            "sessions": list(self.sessions),
            "requests": list(self.requests),
            "peak_requests_per_s": list(self.peak_per_s),
        }
        if cores_per_host:
            ceiling = HOST_REQUESTS_PER_S_PER_CORE * cores_per_host
            out["host_ceiling_requests_per_s"] = ceiling
            out["peak_share_of_ceiling"] = [round(p / ceiling, 3) for p in self.peak_per_s]
        return out


def plan_shards(schedule: Schedule, session_ids, shards: int, seed: int) -> ShardPlan:
    """Split `schedule` (session_ids: the trace's session_id column) into `shards` host shards.

    A session (one --scale copy of it) is never split. Sessions are placed largest first onto the
    shard whose busiest second grows least (ties: the lighter shard, then the lower index)."""
    n = len(schedule)
    codes = session_codes(session_ids)[schedule.record_index]
    group_key = np.stack([codes, schedule.copy_index.astype(np.int64)], axis=1)
    _, group = np.unique(group_key, axis=0, return_inverse=True) if n else (None, np.empty(0, np.int64))
    group = np.asarray(group, np.int64).reshape(-1)
    groups = int(group.max()) + 1 if n else 0
    second = (schedule.scheduled_offset_ns // NS_PER_S).astype(np.int64) if n else np.empty(0, np.int64)
    seconds = int(second.max()) + 1 if n else 1
    order_by_group = np.argsort(group, kind="stable")
    bounds = np.searchsorted(group[order_by_group], np.arange(groups + 1))
    size = np.diff(bounds)
    tiebreak = np.array([_mix(seed, g, shards) for g in range(groups)], np.uint32)
    placing = np.lexsort((tiebreak, -size))
    load = np.zeros((shards, seconds), np.int64)
    total = np.zeros(shards, np.int64)
    owner = np.empty(groups, np.int64)
    for g in placing.tolist():
        members = order_by_group[bounds[g] : bounds[g + 1]]
        secs, counts = np.unique(second[members], return_counts=True)
        peaks = (load[:, secs] + counts).max(axis=1)
        best = int(np.lexsort((np.arange(shards), total, peaks))[0])
        load[best, secs] += counts
        total[best] += counts.sum()
        owner[g] = best
    shard_of = owner[group] if n else np.empty(0, np.int64)
    sessions = np.bincount(owner, minlength=shards) if groups else np.zeros(shards, np.int64)
    return ShardPlan(
        shards=shards,
        shard_of=shard_of,
        sessions=tuple(int(s) for s in sessions),
        requests=tuple(int(t) for t in total),
        peak_per_s=tuple(int(p) for p in load.max(axis=1)),
    )


def _mix(seed: int, group: int, shards: int) -> int:
    return zlib.crc32(f"{seed}:{shards}:{group}".encode())


def select_shard(schedule: Schedule, session_ids, shard: tuple[int, int] | None, seed: int, cores: int):
    """This host's part of `schedule` under `--shard K/N` (all of it without), and the plan's summary."""
    if shard is None:
        return schedule, None
    index, count = shard
    plan = plan_shards(schedule, session_ids, count, seed)
    return schedule.take(plan.positions(index)), {"shard": index, **plan.as_dict(cores_per_host=cores)}


def trace_fingerprint(table) -> str:
    """What identifies a trace's rows and timing: the SHA-256 of its request ids and arrival times."""
    import hashlib

    import pyarrow as pa

    digest = hashlib.sha256()
    for name in ("request_id", "arrival_time"):
        column = table.column(name)
        if pa.types.is_timestamp(column.type):
            column = column.cast(pa.int64())
        for chunk in column.chunks:
            for buffer in chunk.buffers():
                if buffer is not None:
                    digest.update(memoryview(buffer))
    return digest.hexdigest()
