"""The Runner's dispatch on a fake clock (tests/fake_clock.py): heads at their deadlines, session
turns after the previous answer plus think time, shedding beyond max in-flight, the duration cut.
A real in-process HTTP server on 127.0.0.1 answers each request after its X-Delay-Ns of fake time."""

from __future__ import annotations

import asyncio
from array import array

from fake_clock import FakeClock, run_on_fake_clock

from replayer.loop.http_pool import encode_request, parse_endpoint
from replayer.loop.runner import LoopSettings, Runner
from replayer.plan.arrays import NONE, PlanArrays

MS = 1_000_000
START_NS = 1_000 * MS  # the run's offset 0 on the fake clock
ANSWER = b'{"choices": [{"message": {"content": "ok"}, "finish_reason": "stop"}], "usage": {}}'


def plan_arrays(*turns: dict) -> PlanArrays:
    """Plans from dicts of offset_ms and optionally think_ms, next (plan index), follows (bool)."""

    def column(key, scale=1, default=NONE):
        return array("q", (default if t.get(key) is None else round(t[key] * scale) for t in turns))

    return PlanArrays(
        array("q", range(len(turns))),
        array("q", [0] * len(turns)),
        column("offset_ms", MS),
        column("think_ms", MS),
        array("q", [NONE] * len(turns)),
        array("q", [NONE] * len(turns)),
        column("next"),
        bytes(int(t.get("follows", False)) for t in turns),
    )


async def fake_server(clock: FakeClock, arrivals: list[tuple[int, int]]):
    """Answers request `X-Plan: i` after its `X-Delay-Ns` on the clock; logs (fake ns, i) on arrival."""

    async def handle(reader, writer):
        try:
            while True:
                head = (await reader.readuntil(b"\r\n\r\n")).decode().lower()
                fields = dict(line.split(": ", 1) for line in head.split("\r\n")[1:] if ": " in line)
                await reader.readexactly(int(fields["content-length"]))
                arrivals.append((clock.now_ns(), int(fields["x-plan"])))
                await clock.wait_until(clock.now_ns() + int(fields["x-delay-ns"]))
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n")
                writer.write(b"Content-Length: %d\r\n\r\n%s" % (len(ANSWER), ANSWER))
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()

    return await asyncio.start_server(handle, "127.0.0.1", 0)


def replay(plans: PlanArrays, delays_ms: list[float], max_inflight: int = 100, **settings):
    """Run a Runner over `plans` on a fake clock; returns (runner, server arrivals, Sent by plan index)."""
    clock = FakeClock(START_NS - 10 * MS)
    arrivals: list[tuple[int, int]] = []

    async def main():
        server = await fake_server(clock, arrivals)
        endpoint = parse_endpoint(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}")
        requests = [
            encode_request(
                endpoint,
                "POST",
                "/v1/chat/completions",
                [("X-Plan", str(i)), ("X-Delay-Ns", str(round(d * MS)))],
                b"{}",
            )  # fmt: skip
            for i, d in enumerate(delays_ms)
        ]
        loop_settings = dict(
            endpoint=endpoint, start_ns=START_NS, max_inflight=max_inflight, duration_ns=None, grace_ns=10_000 * MS,
            connect_timeout_ns=5_000 * MS, read_timeout_ns=60_000 * MS, early_wake_ns=2 * MS, warm_connections=0,
        )  # fmt: skip
        loop_settings.update(settings)
        runner = Runner(plans, requests, [False] * len(plans), LoopSettings(**loop_settings), clock=clock)
        try:
            await runner.run()
        finally:
            server.close()
        return runner

    runner = run_on_fake_clock(main, clock)
    return runner, arrivals, {sent.plan.index: sent for sent in runner.results}


def ms(ns: int) -> float:
    return (ns - START_NS) / MS


def test_heads_go_at_their_deadlines_in_plan_order_with_no_lag():
    plans = plan_arrays({"offset_ms": 0}, {"offset_ms": 5}, {"offset_ms": 5}, {"offset_ms": 12})
    runner, arrivals, sent = replay(plans, [1, 1, 30, 1])
    assert [(ms(at), i) for at, i in arrivals] == [(0, 0), (5, 1), (5, 2), (12, 3)]
    assert [ms(sent[i].due_ns) for i in range(4)] == [0, 5, 5, 12]
    assert [sent[i].outcome.sent_ns - sent[i].due_ns for i in range(4)] == [0, 0, 0, 0]
    assert [sent[i].outcome.e2e_ns / MS for i in range(4)] == [1, 1, 30, 1]
    assert [s.plan.index for s in runner.results] == [0, 1, 3, 2]  # in the order they finished
    assert (runner.counters.sent, runner.counters.done, runner.counters.errors) == (4, 4, 0)
    assert runner.stop_reason == "completed"


def test_a_session_turn_waits_for_the_answer_plus_its_think_time():
    plans = plan_arrays(
        {"offset_ms": 0, "next": 2},
        {"offset_ms": 1},  # another session, unaffected
        {"offset_ms": 2, "think_ms": 3, "next": 3, "follows": True},  # answer at 10 + 3 > its 2
        {"offset_ms": 40, "think_ms": 1, "follows": True},  # its own schedule is later than 20 + 1
    )
    _, arrivals, sent = replay(plans, [10, 1, 7, 1])
    assert [(ms(at), i) for at, i in arrivals] == [(0, 0), (1, 1), (13, 2), (40, 3)]
    assert [ms(sent[i].due_ns) for i in range(4)] == [0, 1, 13, 40]


def test_requests_beyond_max_inflight_are_shed_and_their_sessions_go_on():
    plans = plan_arrays(
        {"offset_ms": 0},
        {"offset_ms": 1},
        {"offset_ms": 2, "next": 4},  # shed at 2: both slots busy until 10 and 11
        {"offset_ms": 10.5},  # shed: the slot of request 0 frees at 10, request 1's at 11
        {"offset_ms": 3, "think_ms": 20, "follows": True},  # 20 ms after its shed turn
    )
    runner, arrivals, sent = replay(plans, [10, 10, 1, 1, 1], max_inflight=2)
    assert [i for _, i in arrivals] == [0, 1, 3, 4]
    assert sent[2].shed and sent[2].outcome is None and ms(sent[2].due_ns) == 2
    assert not sent[3].shed and ms(sent[3].outcome.sent_ns) == 10.5
    assert ms(sent[4].due_ns) == 22
    assert (runner.counters.shed, runner.counters.sent) == (1, 4)


def test_the_duration_cuts_the_schedule_and_the_grace_period_cuts_what_is_open():
    plans = plan_arrays({"offset_ms": 0}, {"offset_ms": 4}, {"offset_ms": 9.9}, {"offset_ms": 10})
    runner, arrivals, sent = replay(plans, [1, 100, 1, 1], duration_ns=10 * MS, grace_ns=5 * MS)
    assert [i for _, i in arrivals] == [0, 1, 2]
    assert runner.stop_reason == "duration" and runner.cut_after_grace == 1
    assert sent[1].outcome.error_kind == "shutdown"
    assert ms(sent[1].outcome.sent_ns + sent[1].outcome.e2e_ns) == 15  # the end of the run + grace
    assert 3 not in sent
