"""Keep-alive HTTP/1.1 connections to the one target of a run, as plain asyncio protocols.

A request is one pre-encoded `transport.write`; while it is open, its replayer.loop.client.ClientExchange is
the transport's protocol, so received bytes go straight to it. No per-request objects beyond the
exchange, no timers.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from llmreplay.errors import BadInput
from llmreplay.options import http_url


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where the connections go; `base_path` prefixes every request path ("" or "/prefix")."""

    host: str
    port: int
    tls: bool
    host_header: str
    base_path: str


def parse_endpoint(base_url: str) -> Endpoint:
    parsed = http_url(base_url, "--target")
    tls = parsed.scheme == "https"
    default_port = 443 if tls else 80
    port = parsed.port or default_port
    host = parsed.hostname
    shown = f"[{host}]" if ":" in host else host
    host_header = shown if port == default_port else f"{shown}:{port}"
    return Endpoint(host, port, tls, host_header, parsed.path.rstrip("/"))


HEADER_END = b"\r\n\r\n"
_LENGTH = b"\r\nContent-Length: "


def encode_request(
    endpoint: Endpoint, method: str, path: str, headers: Iterable[tuple[str, str]], body: bytes
) -> bytes:
    """Request line, headers and body as the bytes written to the socket (built before the clock)."""
    lines = [f"{method} {endpoint.base_path}{path} HTTP/1.1", f"Host: {endpoint.host_header}"]
    for name, value in headers:
        if any(c in name or c in value for c in "\r\n") or ":" in name:
            raise BadInput(f"header {name!r}: names and values must not contain line breaks or colons")
        lines.append(f"{name}: {value}")
    lines.append(f"Content-Length: {len(body)}")
    try:
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    except UnicodeEncodeError:
        raise BadInput("a header value has characters HTTP/1.1 cannot carry (not Latin-1)") from None
    return head + body


def with_new_body(request: bytes, rewrite: Callable[[bytes], bytes]) -> bytes:
    """An encoded request with its body rewritten and Content-Length (the last header, as
    encode_request writes it) made to fit: a body completed at send time."""
    body_start = request.index(HEADER_END) + len(HEADER_END)
    body = rewrite(request[body_start:])
    length_at = request.rindex(_LENGTH, 0, body_start)
    return b"%s%s%d%s%s" % (request[:length_at], _LENGTH, len(body), HEADER_END, body)


class Connection(asyncio.Protocol):
    """One TCP (or TLS) connection; the transport's protocol while the connection is idle (an
    open request's ClientExchange takes over with `transport.set_protocol` and hands it back)."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.usable = False
        self.served = 0  # answers read on it: a connection that served one is a kept-alive one

    def connection_made(self, transport) -> None:
        self.transport = transport
        self.usable = True

    def data_received(self, data: bytes) -> None:
        self.close()  # bytes while idle, which nobody asked for: the connection is in an unknown state

    def eof_received(self) -> bool:
        return False  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        self.usable = False

    def close(self) -> None:
        self.usable = False
        if self.transport is not None:
            self.transport.close()

    def abort(self) -> None:
        """Close now, discarding what is still buffered for the target (`close` would flush it)."""
        self.usable = False
        if self.transport is not None:
            self.transport.abort()


class ConnectionPool:
    """Idle keep-alive connections, topped up in the background so a send rarely waits for a
    handshake (`spare` connections are kept open ahead of need)."""

    def __init__(self, endpoint: Endpoint, connect_timeout_s: float, spare: int):
        self.endpoint = endpoint
        self.connect_timeout_s = connect_timeout_s
        self.spare = spare
        self._idle: list[Connection] = []
        self._opening = 0
        self._ssl = ssl.create_default_context() if endpoint.tls else None
        self._closed = False
        self.opened = 0

    def take_idle(self) -> Connection | None:
        idle = self._idle
        while idle:
            conn = idle.pop()
            if conn.usable:
                return conn
        return None

    def release(self, conn: Connection) -> None:
        if conn.usable and not self._closed:
            conn.served += 1
            self._idle.append(conn)
        else:
            conn.close()

    async def open(self) -> Connection:
        """A new connection; raises OSError or TimeoutError (both mean connect_error)."""
        loop = asyncio.get_running_loop()
        ep = self.endpoint
        _, conn = await asyncio.wait_for(
            loop.create_connection(
                Connection, ep.host, ep.port, ssl=self._ssl, server_hostname=ep.host if ep.tls else None
            ),
            self.connect_timeout_s,
        )
        self.opened += 1
        if self._closed:
            conn.close()
            raise ConnectionError("the pool is closed")
        return conn

    async def warm(self, count: int) -> None:
        """Open `count` idle connections now (before the clock starts); failures are ignored."""
        results = await asyncio.gather(*(self.open() for _ in range(count)), return_exceptions=True)
        self._idle.extend(c for c in results if isinstance(c, Connection))

    def top_up(self) -> None:
        """Start opening connections until `spare` are idle or on their way (call after a send)."""
        if self._closed:
            return
        missing = self.spare - len(self._idle) - self._opening
        for _ in range(max(0, missing)):
            self._opening += 1
            asyncio.get_running_loop().create_task(self._open_spare())

    async def _open_spare(self) -> None:
        try:
            conn = await self.open()
        except (OSError, TimeoutError):
            return  # a send that needs it will report the failure itself
        finally:
            self._opening -= 1
        self.release(conn)

    def close(self) -> None:
        """Close the idle connections; busy ones close when their request ends."""
        self._closed = True
        for conn in self._idle:
            conn.close()
        self._idle.clear()

    def abort(self) -> None:
        """Like `close`, unflushed (busy connections: their exchanges abort them)."""
        self._closed = True
        for conn in self._idle:
            conn.abort()
        self._idle.clear()
