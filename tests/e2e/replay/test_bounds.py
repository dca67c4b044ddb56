"""`--duration` and `--grace` bound the whole run, requests in flight included: a server that
trickles its answers (one byte every half second, never silent long enough for the read timeout)
cannot keep a replay alive past duration + grace."""

from __future__ import annotations

import asyncio
import subprocess
import time

import orjson
import pytest
from hostile_target import LoopServer
from replay_helpers import ROOT, content_record, replay_cmd, results, run_info, write_content_trace

pytestmark = pytest.mark.e2e  # every test here starts processes

TRICKLE_INTERVAL_S = 0.5
TRICKLE_MAX_S = 60.0  # the server's own bound: it never holds a connection longer
DURATION_S, GRACE_S = 3.0, 3.0


class TrickleServer(LoopServer):
    """HTTP/1.1 on 127.0.0.1 in a thread of the test: /v1/models answers at once; a chat request
    gets a 200 event-stream head, then one byte (an SSE comment) every TRICKLE_INTERVAL_S."""

    def __init__(self):
        super().__init__(name="trickle-server")
        self.arrivals_ns: list[int] = []  # perf_counter_ns of each chat request's head
        self.closed_by_client = 0

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        streaming = False  # idle keep-alive connections (warm-up, the probe) end quietly
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                length = next(
                    (
                        int(v)
                        for k, _, v in (h.partition(":") for h in lines[1:])
                        if k.lower() == "content-length"
                    ),
                    0,
                )
                await reader.readexactly(length)
                if lines[0].startswith("GET /v1/models"):
                    body = orjson.dumps(
                        {"object": "list", "data": [{"id": "sim-model", "owned_by": "trickle"}]}
                    )
                    writer.write(
                        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                        + f"Content-Length: {len(body)}\r\n\r\n".encode()
                        + body
                    )
                    continue
                self.arrivals_ns.append(time.perf_counter_ns())
                streaming = True
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
                )
                until = time.monotonic() + TRICKLE_MAX_S
                while time.monotonic() < until:
                    writer.write(b":")
                    await writer.drain()
                    await asyncio.sleep(TRICKLE_INTERVAL_S)
                    if reader.at_eof():
                        raise ConnectionResetError
                return
        except (asyncio.IncompleteReadError, ConnectionError):
            self.closed_by_client += streaming
        finally:
            writer.close()


@pytest.fixture
def trickle_server():
    with TrickleServer() as server:
        yield server


def test_duration_and_grace_bound_a_run_against_a_trickling_server(tmp_path, trickle_server):
    # six requests inside the duration (they never finish), four after it (never sent)
    at_ms = [0, 400, 800, 1200, 1600, 2000, 3500, 4000, 5000, 6000]
    trace = write_content_trace(tmp_path / "t.parquet", [content_record(i, t) for i, t in enumerate(at_ms)])
    out = tmp_path / "run"
    cmd = replay_cmd(
        trace,
        trickle_server.url,
        out,
        "--engine",
        "openai",
        "--duration",
        str(DURATION_S),
        "--grace",
        str(GRACE_S),
        "--skip-preflight",  # its requests would trickle too (for its own bound, MAX_TIMEOUT_S): not under test
    )
    began = time.monotonic()
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=TRICKLE_MAX_S)
    wall_s = time.monotonic() - began
    assert done.returncode in (0, 1), done.stderr[-2000:]
    info = run_info(out)
    # from the run's offset 0 to the workers' end: the duration, the grace, the cut (< 1 s)
    run_s = (info["ended_unix_ns"] - info["start_unix_ns"]) / 1e9
    assert DURATION_S + GRACE_S - 0.1 < run_s < DURATION_S + GRACE_S + 1.0, run_s
    assert wall_s < DURATION_S + GRACE_S + 12, wall_s  # process start-up, the bodies, the merge
    assert info["stop_reason"] == "duration"
    assert sum(w["cut_after_grace"] for w in info["workers"]) == 6
    rows = results(out)
    assert sorted(r["request_id"] for r in rows) == [f"r{i}" for i in range(6)]
    assert all(r["error_kind"] == "shutdown" and r["http_status"] == 200 for r in rows)
    # each one was cut at duration + grace, whenever it was sent
    for row in rows:
        ended_s = (row["sent_offset_ns"] + row["e2e_ns"]) / 1e9
        assert DURATION_S + GRACE_S - 0.1 < ended_s < DURATION_S + GRACE_S + 0.5, row
    assert len(trickle_server.arrivals_ns) == 6  # the four due after the duration were never sent
    deadline = time.monotonic() + 5  # the server sees every connection go (its next byte fails)
    while trickle_server.closed_by_client < 6 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert trickle_server.closed_by_client == 6
