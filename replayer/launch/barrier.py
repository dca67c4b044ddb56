"""The shared start of a multi-host replay: hosts report ready, the barrier names one wall-clock start a
lead time after the last of them, and serves its clock for the hosts' offset measurement.

No request passes through it: each host paces its own shard against that start on its own clock.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from llmreplay.bounded_read import open_url
from llmreplay.errors import BadInput

POLL_S = 0.05
MAX_BODY = 4096


@dataclass
class BarrierState:
    """Who is ready, and the start once everyone is; guarded by `lock`."""

    shards: int
    lead_ns: int
    ready: dict[int, str] = field(default_factory=dict)  # shard -> host name
    released: set[int] = field(default_factory=set)  # shards that fetched the start
    done: set[int] = field(default_factory=set)  # shards that finished (their end clock read)
    start_unix_ns: int | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)
    all_released: threading.Event = field(default_factory=threading.Event)
    all_done: threading.Event = field(default_factory=threading.Event)

    def register(self, shard: int, shards: int, host: str) -> tuple[int, dict]:
        if shards != self.shards:
            return 409, {"error": f"this barrier waits for {self.shards} shards, not {shards}"}
        if not 0 <= shard < self.shards:
            return 409, {"error": f"shard {shard} is not in 0..{self.shards - 1}"}
        with self.lock:
            holder = self.ready.get(shard)
            if holder is not None and holder != host:
                return 409, {"error": f"shard {shard} is already held by host {holder!r}"}
            self.ready[shard] = host
            if len(self.ready) == self.shards and self.start_unix_ns is None:
                self.start_unix_ns = time.time_ns() + self.lead_ns
            return 200, {"ready": len(self.ready), "shards": self.shards}

    def start_for(self, shard: int) -> tuple[int, dict]:
        with self.lock:
            if self.start_unix_ns is None:
                return 425, {"ready": len(self.ready), "shards": self.shards}
            if shard in self.ready:
                self.released.add(shard)
                if len(self.released) == self.shards:
                    self.all_released.set()
            return 200, {"start_unix_ns": self.start_unix_ns}

    def finish(self, shard: int) -> tuple[int, dict]:
        with self.lock:
            if shard not in self.ready:
                return 409, {"error": f"shard {shard} never reported ready"}
            self.done.add(shard)
            if len(self.done) == self.shards:
                self.all_done.set()
            return 200, {"done": len(self.done), "shards": self.shards}


def serve_barrier(host: str, port: int, state: BarrierState) -> ThreadingHTTPServer:
    """A started barrier server (serve_forever on a daemon thread); `.shutdown()` stops it."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            path, _, query = self.path.partition("?")
            if path == "/time":
                return self._answer(200, {"unix_ns": time.time_ns()})
            if path == "/start":
                params = dict(part.partition("=")[::2] for part in query.split("&") if part)
                return self._answer(*state.start_for(_int(params.get("shard"), -1)))
            return self._answer(
                404, {"error": "routes: GET /time, GET /start?shard=K, POST /ready, POST /done"}
            )

        def do_POST(self):  # noqa: N802
            if self.path not in ("/ready", "/done"):
                return self._answer(404, {"error": "POST /ready or /done only"})
            length = _int(self.headers.get("Content-Length"), 0)
            try:
                body = json.loads(self.rfile.read(min(max(length, 0), MAX_BODY)) or b"{}")
                shard, shards, name = int(body["shard"]), int(body["shards"]), str(body.get("host", ""))
            except (ValueError, KeyError, TypeError):
                return self._answer(400, {"error": 'expected {"shard": K, "shards": N, "host": NAME}'})
            if self.path == "/done":
                return self._answer(*state.finish(shard))
            return self._answer(*state.register(shard, shards, name))

        def _answer(self, status: int, payload: dict) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args) -> None:  # quiet: the barrier prints its own lines
            pass

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="start-barrier", daemon=True).start()
    return server


def await_start(url: str, shard: int, shards: int, host: str, timeout_ns: int) -> int:
    """Report ready to the barrier at `url` and wait for the shared start (unix ns); one line when it
    refuses or does not release in time."""
    base = url.rstrip("/")
    body = json.dumps({"shard": shard, "shards": shards, "host": host}).encode()
    status, answer = _exchange(f"{base}/ready", body, url)
    if status != 200:
        raise BadInput(
            f"--start-barrier {url}: refused shard {shard}/{shards}: {answer.get('error', status)}"
        )
    deadline = time.monotonic_ns() + timeout_ns
    while True:
        status, answer = _exchange(f"{base}/start?shard={shard}", None, url)
        if status == 200 and isinstance(answer.get("start_unix_ns"), int):
            return answer["start_unix_ns"]
        if time.monotonic_ns() >= deadline:
            raise BadInput(
                f"--start-barrier {url}: not released within {timeout_ns / 1e9:.0f} s "
                f"({answer.get('ready', '?')} of {shards} hosts ready)"
            )
        time.sleep(POLL_S)


def check_barrier(url: str) -> None:
    """One line unless `llmreplay barrier` answers at `url` (before a replay writes anything)."""
    status, answer = _exchange(f"{url.rstrip('/')}/time", None, url)
    if status != 200 or not isinstance(answer.get("unix_ns"), int):
        raise BadInput(f"--start-barrier {url}: not an llmreplay barrier (GET /time answered {status})")


def report_done(url: str, shard: int, shards: int, host: str) -> bool:
    """Tell the barrier this shard has finished (it exits once every shard has); False when it is gone."""
    body = json.dumps({"shard": shard, "shards": shards, "host": host}).encode()
    try:
        status, _ = _exchange(f"{url.rstrip('/')}/done", body, url)
    except BadInput:
        return False
    return status == 200


def _exchange(url: str, body: bytes | None, flag_url: str) -> tuple[int, dict]:
    request = urllib.request.Request(url, data=body, method="POST" if body is not None else "GET")
    request.add_header("Content-Type", "application/json")
    try:
        with open_url(request, 5) as response:  # redirects to another origin refused
            return response.status, _json(response.read(MAX_BODY))
    except urllib.error.HTTPError as error:
        return error.code, _json(error.read(MAX_BODY))
    except (OSError, ValueError) as error:
        raise BadInput(f"--start-barrier {flag_url}: cannot reach it ({error})") from None


def _json(data: bytes) -> dict:
    try:
        value = json.loads(data)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _int(text, default: int) -> int:
    try:
        return int(text)
    except (TypeError, ValueError):
        return default
