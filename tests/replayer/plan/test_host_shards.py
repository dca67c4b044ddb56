"""Host shards: whole sessions per host, deterministic, and a busiest second no worse than hashing gives."""

from __future__ import annotations

import zlib

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmreplay.errors import BadInput
from replayer.config import parse_shard
from replayer.plan.host_shards import plan_shards
from replayer.plan.schedule import Schedule

S = 1_000_000_000


def schedule(offsets_ns, copies=None) -> Schedule:
    n = len(offsets_ns)
    none = np.full(n, -1, np.int64)
    copy = np.zeros(n, np.int64) if copies is None else np.asarray(copies, np.int64)
    return Schedule(np.arange(n), copy, np.asarray(offsets_ns, np.int64), none, none, none)


def test_a_session_stays_on_one_host_and_every_request_has_one():
    sessions = pa.array(["a", "a", "b", "b", "c", None, None])
    plan = plan_shards(schedule([0, S, 0, 2 * S, 3 * S, 0, 0]), sessions, 3, seed=0)
    assert plan.shard_of[0] == plan.shard_of[1] and plan.shard_of[2] == plan.shard_of[3]
    assert sum(plan.requests) == 7 and sorted(set(plan.shard_of.tolist())) == [0, 1, 2]
    assert [p.size for p in map(plan.positions, range(3))] == list(plan.requests)


def test_copies_of_one_session_are_separate_sessions():
    plan = plan_shards(schedule([0, 0], copies=[0, 1]), pa.array(["a", "a"]), 2, seed=0)
    assert sorted(plan.shard_of.tolist()) == [0, 1]


def test_same_inputs_same_split_and_the_seed_only_breaks_ties():
    rng = np.random.default_rng(3)
    offsets = np.sort(rng.integers(0, 60 * S, 2000))
    ids = pa.array([f"s{i}" for i in rng.integers(0, 300, 2000)])
    first = plan_shards(schedule(offsets), ids, 4, seed=7)
    again = plan_shards(schedule(offsets), ids, 4, seed=7)
    assert np.array_equal(first.shard_of, again.shard_of)


def test_packing_beats_hashing_on_the_busiest_second():
    # a burst of sessions in one second and a quiet tail: a hash split can put the burst on one host
    offsets = [0] * 40 + [k * S for k in range(1, 41)]
    ids = pa.array([f"burst{i}" for i in range(40)] + [f"tail{i}" for i in range(40)])
    plan = plan_shards(schedule(offsets), ids, 4, seed=0)
    hashed = np.array([zlib.crc32(s.encode()) % 4 for s in ids.to_pylist()])
    hashed_peak = max(np.bincount(np.asarray(offsets)[hashed == k] // S).max() for k in range(4))
    assert max(plan.peak_per_s) == 10 <= hashed_peak


def test_plan_as_dict_states_each_shard_against_one_hosts_ceiling():
    plan = plan_shards(schedule([0, 0, 0]), pa.array(["a", "b", "c"]), 2, seed=0)
    out = plan.as_dict(cores_per_host=2)
    assert out["host_ceiling_requests_per_s"] == 300 and out["peak_requests_per_s"] == [2, 1]


def test_an_empty_schedule_has_empty_shards():
    plan = plan_shards(schedule([]), pa.array([], pa.string()), 3, seed=0)
    assert plan.requests == (0, 0, 0) and plan.shard_of.size == 0


@settings(max_examples=60, deadline=None)
@given(
    rows=st.lists(st.tuples(st.integers(0, 20), st.integers(0, 30 * S)), min_size=0, max_size=200),
    shards=st.integers(1, 6),
)
def test_any_trace_is_split_into_whole_sessions(rows, shards):
    rows.sort(key=lambda r: r[1])
    ids = pa.array([f"s{s}" for s, _ in rows], pa.string())
    plan = plan_shards(schedule([o for _, o in rows]), ids, shards, seed=1)
    owner = {}
    for (session, _), shard in zip(rows, plan.shard_of.tolist(), strict=True):
        assert owner.setdefault(session, shard) == shard
    assert sum(plan.requests) == len(rows) and sum(plan.sessions) == len(owner)


@pytest.mark.parametrize("text", ["", "1", "4/4", "-1/2", "a/b", "0/0", "1/2/3"])
def test_a_bad_shard_is_one_line(text):
    with pytest.raises(BadInput, match="expected K/N"):
        parse_shard(text, "--shard")


def test_a_shard_parses():
    assert parse_shard("3/4", "--shard") == (3, 4)
