"""A tiny upstream that sends known bytes in awkward pieces, to check the proxy forwards them unchanged.

Run as `python rec_fixed_upstream.py PORT`. POST /v1/chat/completions answers an SSE stream split
inside lines and `\\r\\n` pairs, with comments; `?gzip=1` gzip-encodes it. The test imports
`stream_bytes` to know what the client must receive.
"""

from __future__ import annotations

import asyncio
import gzip
import sys

import orjson
from aiohttp import web

GAP_S = 0.02


def stream_bytes() -> bytes:
    parts = [b": keep-alive\r\n\r\n"]
    parts.append(
        b"data: "
        + orjson.dumps({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
        + b"\r\n\r\n"
    )
    for word in ("Bonjour", " \u00e0", " tous", " \u20ac"):
        chunk = {"choices": [{"index": 0, "delta": {"content": word}, "finish_reason": None}]}
        parts.append(b"data: " + orjson.dumps(chunk) + b"\r\n\r\n")
    parts.append(
        b"data: "
        + orjson.dumps({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
        + b"\r\n\r\n"
    )
    parts.append(b"data: [DONE]\r\n\r\n")
    return b"".join(parts)


def pieces(data: bytes, size: int = 37) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


async def chat(request: web.Request) -> web.StreamResponse:
    await request.read()
    compressed = request.query.get("gzip") == "1"
    body = gzip.compress(stream_bytes()) if compressed else stream_bytes()
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    if compressed:
        response.headers["Content-Encoding"] = "gzip"
    await response.prepare(request)
    for piece in pieces(body):
        await response.write(piece)
        await asyncio.sleep(GAP_S)
    await response.write_eof()
    return response


async def health(request: web.Request) -> web.Response:
    return web.Response(text="ok")


def main() -> None:
    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/health", health)
    web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None)


if __name__ == "__main__":
    main()
