"""An HTTP answer's whole body before a deadline: a server that trickles bytes cannot hold the caller."""

from __future__ import annotations

import http.client
import socket
import time


def read_whole(
    response: http.client.HTTPResponse,
    deadline: float,
    sock: socket.socket | None = None,
    max_bytes: int | None = None,
) -> bytes:
    """The body, or TimeoutError once time.monotonic() passes `deadline` (each read is bounded by
    the time left when `sock` is given), or ValueError beyond `max_bytes`."""
    parts, size = [], 0
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("no whole answer in time")
        if sock is not None:
            sock.settimeout(left)
        part = response.read1(65536)
        if not part:
            # read1 never marks a Content-Length body done (its last call asks for 0 bytes): closing does,
            # so the kept-alive connection can carry the next request instead of failing after sending it
            response.close()
            return b"".join(parts)
        size += len(part)
        if max_bytes is not None and size > max_bytes:
            raise ValueError(f"an answer larger than {max_bytes >> 20} MB")
        parts.append(part)
