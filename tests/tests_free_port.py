"""A port with nothing listening on it, for connect-error tests."""

from __future__ import annotations

import socket


def free_port_number() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
