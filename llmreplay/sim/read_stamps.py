"""A request's arrival is the read that brought its first bytes, not the moment its handler ran: the
ground truth that clients' dispatch lag is judged against. Stamped by the connection's protocol,
claimed by a middleware; why and how: docs/design/sim-timing.md."""

from __future__ import annotations

import time

from aiohttp import web
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_server import Server


class StampingRequestHandler(RequestHandler):
    __slots__ = ("unclaimed_read_ns",)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.unclaimed_read_ns: int | None = None  # the first read since the last claim

    def data_received(self, data: bytes) -> None:
        if self.unclaimed_read_ns is None:
            self.unclaimed_read_ns = time.perf_counter_ns()
        super().data_received(data)


class StampingServer(Server):
    """aiohttp's Server, with connections that stamp their reads."""

    def __call__(self) -> RequestHandler:
        return StampingRequestHandler(self, loop=self._loop, **self._kwargs)


def stamp_reads(runner: web.AppRunner) -> None:
    """Make the runner's connections stamp their reads (call after `setup`, before a site starts)."""
    if type(runner.server) is not Server:
        raise RuntimeError(f"cannot stamp reads on {type(runner.server).__name__}")
    runner.server.__class__ = StampingServer


ARRIVAL_KEY = "llmreplay.arrival_mono_ns"  # a plain key: web.RequestKey needs aiohttp 3.12


@web.middleware
async def claim_arrival(request: web.Request, handler):
    """Every request takes its connection's stamp: perf_counter_ns of the read that began it."""
    now = time.perf_counter_ns()
    protocol = request.protocol
    stamp = getattr(protocol, "unclaimed_read_ns", None)
    if stamp is not None:
        protocol.unclaimed_read_ns = None
    request[ARRIVAL_KEY] = now if stamp is None else min(stamp, now)
    return await handler(request)


def drop_body_stamps(request: web.BaseRequest) -> None:
    """The body has been read: reads until now were this request's, not the next one's."""
    protocol = request.protocol
    if isinstance(protocol, StampingRequestHandler):
        protocol.unclaimed_read_ns = None
