"""A hostile target on 127.0.0.1 for tests and benchmarks/hostile_targets.py: endless bodies, redirects
to another origin, error bodies echoing the key, endless SSE streams, a 10 MB unterminated SSE line.

In a test: `with HostileTarget(models="endless") as target: ... target.url`. As a process (the
benchmark: the server's own memory and CPU stay out of the replay's figures):
`python tests/hostile_target.py --models endless` prints `port N` and serves until SIGTERM.

Modes (each route alone):
  models:  "ok" (a model list), "endless" (a JSON body that never ends), "redirect" (302 to `redirect_to`)
  metrics: "ok" (Prometheus text), "slow" (the same after SLOW_S, as a busy engine), "endless", "redirect",
  "none" (404)
  chat:    "ok" (a short stream), "endless" (SSE chunks as fast as the socket takes them),
           "long_line" (a 200 stream whose first line is 10 MB without an end, then silence),
           "echo_key" (HTTP 401 whose JSON body echoes the Authorization key with `\\/` escapes,
           once whole and once straddling the 2,048-byte excerpt cut)
A `Recorder` is a plain listener that remembers whether an Authorization header reached it.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import threading
from dataclasses import dataclass

import orjson

MODEL = "sim-model"
LONG_LINE_BYTES = 10 << 20
SLOW_S = 1.5  # a busy engine answers /metrics after the step it is in: longer than a 1 s interval
_BLOB = b"x" * 65536


def _head(status: str, content_type: str, extra: str = "") -> bytes:
    return (
        f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n{extra}"
        "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    ).encode()


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _whole(status: str, content_type: str, body: bytes, extra: str = "") -> bytes:
    return (
        f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n{extra}Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body


def echo_body(key: str, cut: int = 2048) -> bytes:
    """A JSON error body holding `key` with its `/` escaped as `\\/`: once near the start, once so that it
    straddles the excerpt cut at `cut` bytes."""
    escaped = key.replace("/", "\\/")
    head = b'{"error":{"message":"Incorrect API key provided: ' + escaped.encode() + b". Padding: "
    # the second copy starts 20 bytes before the cut: its first characters fall inside the excerpt
    pad = cut - 20 - len(head) - len(b" again: ")
    return head + b"p" * pad + b" again: " + escaped.encode() + b'","type":"invalid_request_error"}}'


class LoopServer:
    """An asyncio server on 127.0.0.1 in a thread of the caller with its own event loop; the context
    manager starts and stops it (every connection's task cancelled). Subclasses define `_serve`."""

    def __init__(self, port: int = 0, name: str = "loop-server"):
        self.port = port
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def __enter__(self):
        self._thread.start()
        assert self._ready.wait(10)
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            assert not self._thread.is_alive()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", self.port))
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        try:
            self._loop.run_forever()
        finally:
            server.close()
            tasks = asyncio.all_tasks(self._loop)
            for task in tasks:
                task.cancel()
            self._loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
            self._loop.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        raise NotImplementedError


class HostileTarget(LoopServer):
    """The hostile routes (the module's doc); `requests`: the request lines seen."""

    def __init__(
        self,
        models: str = "ok",
        metrics: str = "ok",
        chat: str = "ok",
        redirect_to: str | None = None,
        port: int = 0,
    ):
        super().__init__(port, "hostile-target")
        self.models, self.metrics, self.chat, self.redirect_to = models, metrics, chat, redirect_to
        self.requests: list[str] = []  # request lines

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                headers = {
                    k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in lines[1:] if h)
                }
                await reader.readexactly(int(headers.get("content-length", 0)))
                self.requests.append(lines[0])
                method, path = lines[0].split(" ")[:2]
                if not await self._answer(method, path, headers, writer):
                    return
        except (
            asyncio.IncompleteReadError,
            ConnectionError,
            asyncio.LimitOverrunError,
            asyncio.CancelledError,
        ):
            pass
        finally:
            writer.close()

    async def _answer(self, method: str, path: str, headers: dict, writer: asyncio.StreamWriter) -> bool:
        """Write the answer; False: the connection is done."""
        if path == "/v1/models":
            return await self._route(self.models, path, writer, "application/json", self._model_list())
        if path == "/metrics":
            text = b"# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 1\n"
            return await self._route(self.metrics, path, writer, "text/plain; version=0.0.4", text)
        if method == "POST":
            return await self._chat(headers, writer)
        writer.write(_whole("404 Not Found", "application/json", b'{"error":"not found"}'))
        return True

    def _model_list(self) -> bytes:
        return orjson.dumps({"object": "list", "data": [{"id": MODEL, "owned_by": "hostile"}]})

    async def _route(self, mode: str, path: str, writer, content_type: str, body: bytes) -> bool:
        if mode in ("ok", "slow"):
            await asyncio.sleep(SLOW_S if mode == "slow" else 0)
            writer.write(_whole("200 OK", content_type, body))
            return True
        if mode == "none":
            writer.write(_whole("404 Not Found", "text/plain", b"no"))
            return True
        if mode == "redirect":
            location = f"Location: {self.redirect_to}{path}\r\n"
            writer.write(_whole("302 Found", "text/plain", b"moved", location))
            return True
        # endless: a body that starts like the real one and never ends
        writer.write(_head("200 OK", content_type))
        writer.write(_chunk(body[: len(body) // 2]))
        filler = _chunk(b" " * 65536 if content_type == "application/json" else b"# filler\n" * 7000)
        while True:
            writer.write(filler)
            await writer.drain()

    async def _chat(self, headers: dict, writer) -> bool:
        mode = self.chat
        if mode == "echo_key":
            key = headers.get("authorization", "").removeprefix("Bearer ")
            writer.write(_whole("401 Unauthorized", "application/json", echo_body(key)))
            return True
        writer.write(_head("200 OK", "text/event-stream"))
        if mode == "long_line":
            writer.write(_chunk(b'data: {"choices":[{"delta":{"content":"'))
            for _ in range(LONG_LINE_BYTES // len(_BLOB)):
                writer.write(_chunk(_BLOB))
                await writer.drain()
            await asyncio.sleep(3600)  # the line never ends
        event = b'data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"tok"}}]}\n\n'
        if mode == "endless":
            burst = _chunk(event * 400)
            while True:
                writer.write(burst)
                await writer.drain()
        for _ in range(4):
            writer.write(_chunk(event))
        end = b'data: {"id":"c","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":8,"completion_tokens":4,"total_tokens":12}}\n\ndata: [DONE]\n\n'
        writer.write(_chunk(end) + b"0\r\n\r\n")
        await writer.drain()
        return False


class Recorder:
    """A listener on another port: answers every request 200 `{}`, remembers the Authorization headers."""

    def __init__(self):
        self.authorizations: list[str | None] = []
        self.requests = 0
        self._target = HostileTarget()
        self._target._answer = self._answer  # type: ignore[method-assign]

    async def _answer(self, method, path, headers, writer) -> bool:
        self.requests += 1
        self.authorizations.append(headers.get("authorization"))
        writer.write(_whole("200 OK", "application/json", b'{"object":"list","data":[]}'))
        return True

    def __enter__(self) -> Recorder:
        self._target.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._target.stop()

    @property
    def url(self) -> str:
        return self._target.url


@dataclass
class Watched:
    returncode: int | None  # None: killed by the watch (over the memory bound or the time bound)
    stdout: str
    stderr: str
    peak_rss_mb: float  # the largest RSS any process of the tree reached (sampled)
    killed: str | None  # why the watch killed it


def run_watched(
    cmd: list[str], timeout_s: float, max_rss_mb: float, cwd=None, sample_s: float = 0.05
) -> Watched:
    """Run `cmd`, sampling its process tree's RSS; kill the tree past `max_rss_mb` or `timeout_s`, so a
    test of an unbounded read fails instead of filling the machine."""
    import subprocess
    import tempfile
    import time

    import psutil

    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(cmd, cwd=cwd, stdout=out, stderr=err)
        root, peak, killed = psutil.Process(proc.pid), 0, None
        until = time.monotonic() + timeout_s
        while proc.poll() is None:
            try:
                procs = [root, *root.children(recursive=True)]
            except psutil.NoSuchProcess:
                procs = []
            for p in procs:
                try:
                    peak = max(peak, p.memory_info().rss)
                except psutil.Error:
                    pass
            if peak > max_rss_mb * 2**20 or time.monotonic() > until:
                killed = f"over {max_rss_mb} MB" if peak > max_rss_mb * 2**20 else f"over {timeout_s} s"
                for p in reversed(procs):
                    try:
                        p.kill()
                    except psutil.Error:
                        pass
                proc.wait(10)
                break
            time.sleep(sample_s)
        out.seek(0)
        err.seek(0)
        return Watched(
            None if killed else proc.returncode,
            out.read().decode("utf-8", "replace"),
            err.read().decode("utf-8", "replace"),
            peak / 2**20,
            killed,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="ok")
    parser.add_argument("--metrics", default="ok")
    parser.add_argument("--chat", default="ok")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    target = HostileTarget(args.models, args.metrics, args.chat, port=args.port)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    with target:
        print(f"port {target.port}", flush=True)
        stop.wait()


if __name__ == "__main__":
    main()
