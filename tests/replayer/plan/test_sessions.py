"""Sessions on hand-made schedules: which worker owns a session, how turns chain, which rows share one.
(From a trace through to linked sessions, and session_due_ns: test_schedule.py.)"""

from __future__ import annotations

import zlib

import numpy as np
import pyarrow as pa

from replayer.plan.arrays import NONE
from replayer.plan.schedule import Schedule
from replayer.plan.sessions import link_sessions, session_codes, worker_of


def schedule(offsets_ms: list[int], copies: list[int] | None = None) -> Schedule:
    n = len(offsets_ms)
    none = np.full(n, NONE, np.int64)
    return Schedule(
        np.arange(n, dtype=np.int64),
        np.array(copies or [0] * n, np.int64),
        np.array(offsets_ms, np.int64) * 1_000_000,
        none.copy(),
        none.copy(),
        none.copy(),
    )


def chains(plans) -> list[tuple[int, int | None, bool]]:
    return [(p.index, p.next_index, p.follows_previous) for p in (plans[i] for i in range(len(plans)))]


def test_a_session_belongs_to_the_worker_of_its_key_crc_on_every_machine():
    assert [worker_of(key, 3) for key in ("a", "b", "a#c1")] == [
        zlib.crc32(k) % 3 for k in (b"a", b"b", b"a#c1")
    ]
    assert worker_of("anything", 1) == 0


def test_turns_chain_in_turn_order_even_when_a_later_turn_arrived_first():
    plans = link_sessions(
        schedule([0, 5, 10]),
        np.arange(3),
        session_codes=np.array([7, 7, 7]),
        turn_index=np.array([2, 0, 1]),  # by trace row: row 1 is the first turn, row 0 the last
    )
    assert chains(plans) == [(0, None, True), (1, 2, False), (2, 0, True)]


def test_equal_turns_chain_by_due_time_and_copies_are_sessions_of_their_own():
    plans = link_sessions(
        schedule([0, 0, 3, 3], copies=[0, 1, 0, 1]),
        np.arange(4),
        session_codes=np.array([4, 4, 4, 4]),
        turn_index=np.array([0, 0, 0, 0]),
    )
    assert chains(plans) == [(0, 2, False), (1, 3, False), (2, None, True), (3, None, True)]


def test_rows_without_a_session_id_are_each_a_session_alone():
    ids = pa.array(["a", None, "b", "a", None])
    codes = session_codes(ids)
    assert codes[0] == codes[3] and len({codes[0], codes[1], codes[2], codes[4]}) == 4
    assert session_codes(pa.chunked_array([ids[:2], ids[2:]])).tolist() == codes.tolist()
