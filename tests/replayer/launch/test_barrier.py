"""The start barrier: one start for every host, a lead after the last one is ready; refusals are one line."""

from __future__ import annotations

import threading
import time

import pytest

from llmreplay.errors import BadInput
from replayer.launch.barrier import BarrierState, await_start, serve_barrier
from replayer.launch.host_clock import clock_report, kernel_clock, offset_against

MS = 1_000_000


@pytest.fixture
def barrier():
    state = BarrierState(shards=3, lead_ns=100 * MS)
    server = serve_barrier("127.0.0.1", 0, state)
    yield state, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_every_host_gets_the_same_start_after_the_last_is_ready(barrier):
    state, url = barrier
    starts, ready_at = {}, {}

    def host(k):
        time.sleep(0.05 * k)  # hosts become ready one after another
        ready_at[k] = time.time_ns()
        starts[k] = await_start(url, k, 3, f"host{k}", 5_000 * MS)

    threads = [threading.Thread(target=host, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert len(set(starts.values())) == 1
    assert starts[0] >= max(ready_at.values()) + 100 * MS - 5 * MS  # the lead runs from the last ready
    assert state.all_released.is_set()


def test_a_barrier_not_released_in_time_says_how_many_were_ready(barrier):
    _, url = barrier
    with pytest.raises(BadInput, match=r"not released within 0 s \(1 of 3 hosts ready\)"):
        await_start(url, 0, 3, "alone", 200 * MS)


def test_a_wrong_shard_count_or_a_taken_shard_is_refused(barrier):
    _, url = barrier
    with pytest.raises(BadInput, match="waits for 3 shards, not 4"):
        await_start(url, 0, 4, "h", 100 * MS)
    with pytest.raises(BadInput, match=r"not released"):
        await_start(url, 1, 3, "first", 50 * MS)
    with pytest.raises(BadInput, match="already held by host 'first'"):
        await_start(url, 1, 3, "second", 50 * MS)


def test_an_unreachable_barrier_is_one_line():
    with pytest.raises(BadInput, match="cannot reach it"):
        await_start("http://127.0.0.1:9", 0, 1, "h", 100 * MS)


def test_the_offset_against_the_barriers_clock_is_bounded_by_half_the_round_trip(barrier):
    _, url = barrier
    sample = offset_against(f"{url}/time", samples=8)
    assert sample is not None and sample.samples == 8
    assert abs(sample.offset_ns) <= sample.rtt_ns  # one machine, one clock: within the exchange's own bound
    assert sample.bound_ns < 50 * MS


def test_the_kernels_clock_bound_is_read_and_reported():
    kernel = kernel_clock()
    assert kernel is not None and kernel.maxerror_us >= 0 and kernel.state
    report = clock_report(None)
    assert report["kernel"]["maxerror_us"] >= 0 and report["offset"] is None
