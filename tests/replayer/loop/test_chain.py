"""Chained Responses turns: each is sent with the response id staging gave the session's previous
turn in place of the placeholder; after a failed turn the rest of the chain is not sent (chain_broken).
A real in-process HTTP server on 127.0.0.1 answers with Responses objects and logs what it was sent."""

from __future__ import annotations

import asyncio
from array import array

import orjson
from fake_clock import FakeClock, run_on_fake_clock

from llmreplay.wire.responses_api import PREVIOUS_RESPONSE_PLACEHOLDER
from replayer.loop.chain import is_chained, with_previous_response
from replayer.loop.http_pool import encode_request, parse_endpoint
from replayer.loop.runner import LoopSettings, Runner
from replayer.plan.arrays import NONE, PlanArrays

MS = 1_000_000
START_NS = 1_000 * MS


def test_the_placeholder_is_replaced_and_the_length_fits():
    endpoint = parse_endpoint("http://127.0.0.1:1")
    body = orjson.dumps({"input": "hi", "previous_response_id": PREVIOUS_RESPONSE_PLACEHOLDER})
    request = encode_request(endpoint, "POST", "/v1/responses", [("X-A", "1")], body)
    assert is_chained(request) and not is_chained(request.replace(b"llmreplay-", b"x"))
    sent = with_previous_response(request, 'resp_"1"')
    head, _, sent_body = sent.partition(b"\r\n\r\n")
    assert orjson.loads(sent_body)["previous_response_id"] == 'resp_"1"'
    assert head.endswith(b"Content-Length: %d" % len(sent_body)) and b"X-A: 1" in head


async def responses_server(seen: list[tuple[int, str | None]], fail: set[int]):
    """Answers `X-Plan: i` with response id resp_i (HTTP 500 for i in `fail`); logs what each named."""

    async def handle(reader, writer):
        try:
            while True:
                head = (await reader.readuntil(b"\r\n\r\n")).decode().lower()
                fields = dict(line.split(": ", 1) for line in head.split("\r\n")[1:] if ": " in line)
                body = orjson.loads(await reader.readexactly(int(fields["content-length"])))
                plan = int(fields["x-plan"])
                seen.append((plan, body.get("previous_response_id")))
                answer = orjson.dumps(
                    {"id": f"resp_{plan}", "status": "completed", "output": [], "usage": {"input_tokens": 1}}
                )
                status = b"500 Internal Server Error" if plan in fail else b"200 OK"
                writer.write(b"HTTP/1.1 %s\r\nContent-Type: application/json\r\n" % status)
                writer.write(b"Content-Length: %d\r\n\r\n%s" % (len(answer), answer))
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()

    return await asyncio.start_server(handle, "127.0.0.1", 0)


def replay_chain(turns: int, fail: set[int]):
    """One session of `turns` Responses turns, every one after the first chained."""
    clock = FakeClock(START_NS - 10 * MS)
    seen: list[tuple[int, str | None]] = []
    plans = PlanArrays(
        array("q", range(turns)),
        array("q", [0] * turns),
        array("q", [0] * turns),
        array("q", [0] * turns),
        array("q", [NONE] * turns),
        array("q", [NONE] * turns),
        array("q", [*range(1, turns), NONE]),
        bytes([0] + [1] * (turns - 1)),
    )

    async def main():
        server = await responses_server(seen, fail)
        endpoint = parse_endpoint(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}")
        chained = {"input": "next", "previous_response_id": PREVIOUS_RESPONSE_PLACEHOLDER}
        requests = [
            encode_request(
                endpoint,
                "POST",
                "/v1/responses",
                [("X-Plan", str(i))],
                orjson.dumps(chained if i else {"input": "first"}),
            )  # fmt: skip
            for i in range(turns)
        ]
        settings = LoopSettings(
            endpoint=endpoint, start_ns=START_NS, max_inflight=10, duration_ns=None, grace_ns=1_000 * MS,
            connect_timeout_ns=5_000 * MS, read_timeout_ns=60_000 * MS, early_wake_ns=2 * MS, warm_connections=0,
        )  # fmt: skip
        runner = Runner(
            plans, requests, [False] * turns, settings, clock=clock, dialects=["responses"] * turns
        )
        try:
            await runner.run()
        finally:
            server.close()
        return runner

    runner = run_on_fake_clock(main, clock)
    return seen, {sent.plan.index: sent.outcome for sent in runner.results}


def test_every_turn_names_the_id_staging_gave_the_previous_one():
    seen, outcomes = replay_chain(3, fail=set())
    assert seen == [(0, None), (1, "resp_0"), (2, "resp_1")]
    assert [outcomes[i].error_kind for i in range(3)] == [None, None, None]
    assert outcomes[2].response_id == "resp_2"


def test_after_a_failed_turn_the_rest_of_the_chain_is_not_sent():
    seen, outcomes = replay_chain(3, fail={0})
    assert seen == [(0, None)]
    assert [outcomes[i].error_kind for i in range(3)] == ["http_5xx", "chain_broken", "chain_broken"]
    assert not outcomes[1].on_wire
