"""A kept-alive connection the server closes as the next request is written (its idle timeout raced the
send) gets that request sent once more on a fresh connection; any other loss stays an error.
A real in-process HTTP server on 127.0.0.1 answers or drops by what it was told."""

from __future__ import annotations

import asyncio
from array import array

from fake_clock import FakeClock, run_on_fake_clock

from replayer.loop.http_pool import encode_request, parse_endpoint
from replayer.loop.runner import LoopSettings, Runner
from replayer.plan.arrays import NONE, PlanArrays

MS = 1_000_000
START_NS = 1_000 * MS
ANSWER = b'{"choices":[{"message":{"content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1}}'


async def dropping_server(log: list[tuple[int, int]], drop_second_on_a_connection: bool, drop_every: bool):
    """Logs (connection number, request number on it); drops the connection, unanswered, at its second
    request (or at every request with `drop_every`)."""
    connections = 0

    async def handle(reader, writer):
        nonlocal connections
        connections += 1
        number, served = connections, 0
        try:
            while True:
                head = (await reader.readuntil(b"\r\n\r\n")).decode().lower()
                fields = dict(line.split(": ", 1) for line in head.split("\r\n")[1:] if ": " in line)
                await reader.readexactly(int(fields["content-length"]))
                served += 1
                log.append((number, served))
                if drop_every or (drop_second_on_a_connection and served == 2):
                    break  # close without a byte of answer
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n")
                writer.write(b"Content-Length: %d\r\n\r\n%s" % (len(ANSWER), ANSWER))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()

    return await asyncio.start_server(handle, "127.0.0.1", 0)


def replay_two(drop_second_on_a_connection: bool = True, drop_every: bool = False):
    """Two requests 50 ms apart (the second finds the first's connection idle in the pool)."""
    clock = FakeClock(START_NS - 10 * MS)
    log: list[tuple[int, int]] = []
    plans = PlanArrays(
        array("q", [0, 1]), array("q", [0, 0]), array("q", [0, 50 * MS]), array("q", [NONE, NONE]),
        array("q", [NONE, NONE]), array("q", [NONE, NONE]), array("q", [NONE, NONE]), bytes(2),
    )  # fmt: skip

    async def main():
        server = await dropping_server(log, drop_second_on_a_connection, drop_every)
        endpoint = parse_endpoint(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}")
        requests = [encode_request(endpoint, "POST", "/v1/chat/completions", [], b'{"messages":[]}')] * 2
        settings = LoopSettings(
            endpoint=endpoint, start_ns=START_NS, max_inflight=10, duration_ns=None, grace_ns=1_000 * MS,
            connect_timeout_ns=5_000 * MS, read_timeout_ns=60_000 * MS, early_wake_ns=2 * MS, warm_connections=0,
        )  # fmt: skip
        runner = Runner(plans, requests, [False, False], settings, clock=clock)
        try:
            await runner.run()
        finally:
            server.close()
        return runner

    runner = run_on_fake_clock(main, clock)
    return log, {sent.plan.index: sent.outcome for sent in runner.results}, runner


def test_a_request_lost_on_a_stale_kept_alive_connection_is_sent_again_on_a_fresh_one():
    log, outcomes, runner = replay_two()
    assert [outcomes[i].error_kind for i in (0, 1)] == [None, None]
    assert log[:2] == [(1, 1), (1, 2)] and (1, 2) in log and log[-1][1] == 1  # then on a new connection
    assert runner.stale_resends == 1 and runner.counters.sent == 2  # sent once as far as the run counts


def test_a_fresh_connection_closed_unanswered_is_an_error_not_a_resend():
    log, outcomes, runner = replay_two(drop_second_on_a_connection=False, drop_every=True)
    assert [outcomes[i].error_kind for i in (0, 1)] == ["connection_reset", "connection_reset"]
    assert runner.stale_resends == 0 and len(log) == 2
