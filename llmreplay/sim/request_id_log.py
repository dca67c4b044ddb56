"""`--request-id-log PATH`: one JSON line per request (method, path, X-Request-ID), for tests that check
who sent what. Off by default; a small unbuffered write on the loop, so not for load runs."""

from __future__ import annotations

import json

from aiohttp import web


def request_id_logger(path: str):
    """An aiohttp middleware appending {"method", "path", "request_id"} of each request to `path`."""
    sink = open(path, "a", encoding="utf-8", buffering=1)  # noqa: SIM115 (open for the server's life)

    @web.middleware
    async def log_request_id(request: web.Request, handler):
        line = {
            "method": request.method,
            "path": request.path,
            "request_id": request.headers.get("X-Request-ID"),
        }
        sink.write(json.dumps(line) + "\n")
        return await handler(request)

    return log_request_id
