"""The live latencies come from the spools as they grow: whole frames only, errors by kind, a window."""

from __future__ import annotations

import time
from collections import Counter

from replayer.loop.client import Outcome
from replayer.loop.result_spool import SPOOL_BATCH, ResultSpool, partial_path
from replayer.observe.spool_tail import SHED, WINDOW_NS, SpoolTail, Window


class _Plan:
    def __init__(self, index):
        self.index = index


class _Sent:
    def __init__(self, index, outcome):
        self.plan, self.due_ns, self.outcome = _Plan(index), 0, outcome


def _ok(sent_ns, ttft_ns, e2e_ns):
    outcome = Outcome(sent_ns)
    outcome.ttft_ns, outcome.e2e_ns, outcome.http_status = ttft_ns, e2e_ns, 200
    return outcome


def _failed(kind):
    outcome = Outcome(0)
    outcome.error_kind = kind
    return outcome


def test_frames_are_read_as_they_land_and_a_half_written_one_waits(tmp_path):
    path = tmp_path / "results-0.marshal"
    spool = ResultSpool(path)
    tail = SpoolTail([path], Window(), Window(), Counter())
    tail.read()  # nothing spooled yet
    assert tail.e2e.count == 0
    for i in range(SPOOL_BATCH):
        spool.append(_Sent(i, _ok(1_000, 10 + i, 100 + i)))
    for _ in range(500):  # the spool's writer thread writes the full batch: at most 5 s
        if partial_path(path).stat().st_size > 0:
            break
        time.sleep(0.01)
    data = partial_path(path).read_bytes()
    half = tmp_path / "half.marshal"
    partial_path(half).write_bytes(data[: len(data) // 2])
    halves = SpoolTail([half], Window(), Window(), Counter())
    halves.read()
    assert halves.e2e.count == 0  # the frame is not whole yet
    with open(partial_path(half), "ab") as handle:
        handle.write(data[len(data) // 2 :])
    halves.read()
    assert halves.e2e.count == SPOOL_BATCH
    spool.append(_Sent(SPOOL_BATCH, None))  # shed
    spool.append(_Sent(SPOOL_BATCH + 1, _failed("http_5xx")))
    spool.close()  # the rest, then renamed: the open handle reads on
    tail.close()
    assert tail.e2e.count == SPOOL_BATCH and tail.ttft.count == SPOOL_BATCH
    assert tail.e2e.sum_ns == sum(100 + i for i in range(SPOOL_BATCH))
    assert tail.errors == {SHED: 1, "http_5xx": 1}


def test_window_quantiles_cover_the_last_minute_by_nearest_rank():
    window = Window()
    window.add(0, 999_000_000_000)  # finished long ago: out of the window
    for value in range(1, 101):
        window.add(WINDOW_NS, value * 1_000_000)
    at = 2 * WINDOW_NS - 1
    assert window.quantiles((0.5, 0.99), at) == [0.051, 0.1]
    assert window.count == 101
    nan = window.quantiles((0.5,), 10 * WINDOW_NS)[0]
    assert nan != nan
