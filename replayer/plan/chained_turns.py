"""The chained turns of a replay's shards: how each planned request with server-side state is sent
(replayer.plan.responses_state) and the ancestor rows an expanded one carries, read before the bodies.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow.compute as pc

from llmreplay.trace_format import TraceRecord
from llmreplay.trace_io import trace_files
from replayer.plan.arrays import NONE
from replayer.plan.responses_state import (
    EXPANDED,
    PLAIN,
    PREVIOUS_RESPONSE,
    ancestors,
    sending_modes,
    state_summary,
)
from replayer.plan.trace_rows import stream_records

_COLUMNS = ("request_id", "parent_request_id", "server_state")


@dataclass
class ChainedTurns:
    """By shard: plan index -> CHAINED or EXPANDED (absent: PLAIN); and what expanding needs."""

    modes: list[dict[int, int]]
    parent_of: dict[str, str | None] = field(default_factory=dict)  # rows with server state only
    records: dict[str, TraceRecord] = field(default_factory=dict)  # ancestors of expanded turns
    summary: dict | None = None

    def sending(self, shard: int, index: int) -> int:
        return self.modes[shard].get(index, PLAIN)

    def history(self, record: TraceRecord) -> list[TraceRecord]:
        """The ancestors of a turn with server state, root first (those the trace holds): an expanded
        turn is sent with them, a chained one fitted on them."""
        chain = ancestors(record.request_id, self.parent_of)
        return [self.records[a] for a in chain if a in self.records]


def chained_turns(trace_path: str, shards: Sequence, mode: str) -> ChainedTurns | None:
    """None when no row of the trace has server state (the common case: only that column is read)."""
    if not _any_server_state(trace_path):
        return None
    ids, parents, states = _columns(trace_path)
    stateful = np.flatnonzero(pc.is_valid(states).to_numpy(zero_copy_only=False))
    if not len(stateful):
        return None
    ids_list, parents_list, states_list = ids.to_pylist(), parents.to_pylist(), states.to_pylist()
    parent_of = {ids_list[r]: parents_list[r] for r in stateful.tolist()}
    modes: list[dict[int, int]] = []
    all_modes, not_previous = [], 0
    for shard in shards:
        rows = np.frombuffer(shard.rows, np.int64)
        planned = np.flatnonzero(np.isin(rows, stateful))
        previous = _previous_plan(np.frombuffer(shard.plans.next_index, np.int64))
        previous_ids = [ids_list[rows[p]] if p != NONE else None for p in previous[planned].tolist()]
        chosen = sending_modes(
            [states_list[r] for r in rows[planned].tolist()],
            [parents_list[r] for r in rows[planned].tolist()],
            previous_ids,
            mode,
        )
        modes.append({int(i): m for i, m in zip(planned.tolist(), chosen, strict=True) if m != PLAIN})
        all_modes += chosen
        not_previous += sum(
            1
            for m, r, prev in zip(chosen, rows[planned].tolist(), previous_ids, strict=True)
            if m == EXPANDED and states_list[r] == PREVIOUS_RESPONSE and parents_list[r] != prev
        )
    wanted: set[str] = set()
    for shard_modes, shard in zip(modes, shards, strict=True):
        wanted |= _wanted(shard_modes, shard, ids_list, parent_of)
    rows_wanted = sorted(r for r, rid in enumerate(ids_list) if rid in wanted)
    records = {record.request_id: record for _, record in stream_records(trace_path, rows_wanted)}
    return ChainedTurns(modes, parent_of, records, state_summary(mode, all_modes, not_previous))


def _wanted(shard_modes: dict[int, int], shard, ids_list: list, parent_of: dict) -> set[str]:
    rows = np.frombuffer(shard.rows, np.int64)
    found: set[str] = set()
    for index in shard_modes:  # an expanded turn is sent with them, a chained one is fitted on them
        found.update(ancestors(ids_list[rows[index]], parent_of))
    return found


def _previous_plan(next_index: np.ndarray) -> np.ndarray:
    """Each plan's predecessor in its session (NONE for a first turn): next_index inverted."""
    previous = np.full(len(next_index), NONE, np.int64)
    linked = np.flatnonzero(next_index != NONE)
    previous[next_index[linked]] = linked
    return previous


def _any_server_state(trace_path: str) -> bool:
    import pyarrow.parquet as pq

    for file in trace_files(trace_path):
        handle = pq.ParquetFile(file)
        if "server_state" in handle.schema_arrow.names:
            states = handle.read(columns=["server_state"]).column(0)
            if states.null_count < len(states):
                return True
    return False


def _columns(trace_path: str):
    """The three columns of every row in file order, read alone (the coordinator validated the trace);
    a file older than server_state (1.3) has no stateful rows."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    parts = []
    for file in trace_files(trace_path):
        handle = pq.ParquetFile(file)
        names = handle.schema_arrow.names
        table = handle.read(columns=[c for c in _COLUMNS if c in names])
        for name in _COLUMNS:
            if name not in table.column_names:
                table = table.append_column(name, pa.nulls(table.num_rows, pa.string()))
        parts.append(table.select(_COLUMNS).cast(pa.schema([(c, pa.string()) for c in _COLUMNS])))
    if not parts:
        return (pa.array([], pa.string()),) * 3
    table = pa.concat_tables(parts)
    return tuple(table.column(name).combine_chunks() for name in _COLUMNS)
