"""HTTP/2 clients: a stream's row is filed once its end has reached the client; a hang-up is recorded as one.
Runs on the event loop and fails open (an exception files the row as it is, never reaches mitmproxy).
What mitmproxy does with HTTP/2 streams, the definition recorded and its limits: docs/design/http2-hangups.md."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable

import h2
import h2.errors
import h2.stream
from hyperframe.frame import RstStreamFrame
from mitmproxy import connection, http
from mitmproxy.proxy.layers.http import HttpLayer
from mitmproxy.version import VERSION as MITMPROXY_VERSION

from recorder.capture import keep_delivered

log = logging.getLogger("llmreplay.recorder")

GRACE_S = 1.0  # how long after its end was delivered a stream's reset still counts as a hang-up
SWEEP_S = 0.05  # how often held streams are looked at
MAX_HELD = 100_000  # beyond this, rows are filed at once (fail open)
HANG_UP_PREFIX = "client disconnected (HTTP/2: "  # classify_error's cue: no [DONE] excuse

_ENDED = (h2.stream.StreamClosedBy.SEND_END_STREAM, h2.stream.StreamClosedBy.RECV_END_STREAM)
_RECV_RST = h2.stream.StreamClosedBy.RECV_RST_STREAM
_SEND_RST = h2.stream.StreamClosedBy.SEND_RST_STREAM
_CONNECTION_CLOSED = ("peer closed connection", "HTTP/2 connection closed")  # mitmproxy's words
_HALF_CLOSED_LOCAL = h2.stream.StreamState.HALF_CLOSED_LOCAL
_CAN_WRITE = connection.ConnectionState.CAN_WRITE
_TAP_VERSIONS = MITMPROXY_VERSION.split(".")[0] == "12" and h2.__version__.split(".")[0] == "4"

FileRow = Callable[[str], None]  # settles the capture of this flow id (pops it from Recorder.live, amends it)


class _Conn:
    """One HTTP/2 client connection: mitmproxy's layers for it and the streams held on it."""

    __slots__ = ("next_layers", "client", "http", "h2", "held", "resets", "tapped")

    def __init__(self, client: connection.Client):
        self.next_layers: list = []
        self.client = client
        self.http: HttpLayer | None = None
        self.h2 = None  # the connection's BufferedH2Connection
        self.held: dict[int, _Held] = {}  # stream id -> held row
        self.resets: dict[str, tuple[int, int]] = {}  # flow id -> (error code, bytes unsent) until error()
        self.tapped = False

    def resolve(self) -> bool:
        """Find this connection's HttpLayer and HTTP/2 state (once); False if it is not HTTP/2 (yet)."""
        if self.h2 is not None:
            return True
        for next_layer in self.next_layers:
            layer = next_layer.layer
            for _ in range(8):  # reverse mode: ClientTLSLayer -> HttpLayer
                if layer is None or isinstance(layer, HttpLayer):
                    break
                layer = getattr(layer, "child_layer", None)
            if isinstance(layer, HttpLayer):
                h2_conn = getattr(layer.connections.get(self.client), "h2_conn", None)
                if h2_conn is not None and hasattr(h2_conn, "stream_buffers"):
                    self.http, self.h2 = layer, h2_conn
                    self.next_layers = []
                    return True
        return False

    def unsent(self, stream_id: int) -> int:
        """Bytes of the stream still in mitmproxy's send buffer (not yet within the client's window)."""
        buffered = self.h2.stream_buffers.get(stream_id)  # a defaultdict: never index it
        return sum(len(chunk.data) for chunk in buffered) if buffered else 0

    def stream_id_of(self, flow: http.HTTPFlow) -> int | None:
        for stream_id, stream in reversed(self.http.streams.items()):  # the newest is the likeliest
            if getattr(stream, "flow", None) is flow:
                return stream_id
        return None


class _Held:
    __slots__ = ("flow_id", "cap", "conn", "stream_id", "stream", "file", "deadline", "unsent", "done")

    def __init__(self, flow_id, cap, conn, stream_id, stream, file):
        self.flow_id = flow_id
        self.cap = cap
        self.conn = conn
        self.stream_id = stream_id
        self.stream = stream  # h2's H2Stream: its state outlives its entry in h2's table
        self.file = file
        self.deadline: float | None = None  # set once the end is delivered
        self.unsent = 0  # last seen
        self.done = False


class H2StreamWatch:
    """A child addon of the Recorder (mitmproxy calls next_layer, requestheaders, client_disconnected);
    the Recorder calls hold() from its response hook, errored() from its error hook and flush() when done."""

    def __init__(self) -> None:
        self._conns: dict[str, _Conn] = {}  # client connection id -> state
        self._new: list[_Held] = []  # held in a response hook, not yet looked at after it
        self._grace: deque[_Held] = deque()  # end delivered, in order of deadline
        self._pending: dict[int, _Held] = {}  # end not delivered yet (flow control), by id()
        self._timer: asyncio.TimerHandle | None = None
        self._after_hooks_due = False
        self._failed = False
        self.held_count = 0  # for tests and counters: rows ever held
        self.hang_ups = 0  # rows turned into client_disconnected here

    # -- mitmproxy hooks -------------------------------------------------------------------
    def next_layer(self, data) -> None:
        try:
            client = data.context.client
            conn = self._conns.get(client.id)
            if conn is None:
                conn = self._conns[client.id] = _Conn(client)
            if conn.h2 is None and len(conn.next_layers) < 4:
                conn.next_layers.append(data)
        except Exception:  # noqa: BLE001 - never into mitmproxy
            self._fail("next_layer")

    def requestheaders(self, flow: http.HTTPFlow) -> None:
        """Start watching resets on an HTTP/2 client connection at its first request."""
        if flow.client_conn.alpn != b"h2":
            return
        try:
            conn = self._conns.get(flow.client_conn.id)
            if conn is not None and not conn.tapped and conn.resolve():
                conn.tapped = True
                _tap_resets(conn.h2, lambda stream_id, code, conn=conn: self._on_reset(conn, stream_id, code))
        except Exception:  # noqa: BLE001
            self._fail("requestheaders")

    def client_disconnected(self, client: connection.Client) -> None:
        conn = self._conns.pop(client.id, None)
        if conn is None or not conn.held:
            return
        try:
            now = time.monotonic()
            for held in list(conn.held.values()):
                self._advance(held, now, connection_gone=True)
        except Exception:  # noqa: BLE001
            self._fail("client_disconnected")
            self._release(conn)

    # -- called by the Recorder ------------------------------------------------------------
    def hold(self, flow: http.HTTPFlow, cap, file: FileRow) -> bool:
        """True if this row waits for its stream's end (the Recorder keeps the capture live and lets
        `file` file it later); False to file it now (not HTTP/2, or anything unexpected)."""
        if flow.client_conn.alpn != b"h2" or self._failed or (cap.status or 0) >= 400:
            return False  # an HTTP error stays one, whatever the client did with its body
        try:
            conn = self._conns.get(flow.client_conn.id)
            if conn is None or not conn.resolve() or len(self._pending) + len(self._grace) >= MAX_HELD:
                return False
            stream_id = conn.stream_id_of(flow)
            stream = conn.h2.streams.get(stream_id) if stream_id is not None else None
            if stream is None or stream_id in conn.held:
                reset = conn.resets.pop(flow.id, None)  # reset and already dropped by h2, before this hook
                if reset is not None:
                    reason = f"stream reset by client ({_code_name(reset[0])}) before its end was written"
                    _as_hang_up(cap, reason, reset[1])
                    self.hang_ups += 1
                return False
            held = _Held(flow.id, cap, conn, stream_id, stream, file)
            conn.held[stream_id] = held
            self._new.append(held)
            self.held_count += 1
            if not self._after_hooks_due:
                self._after_hooks_due = True
                asyncio.get_running_loop().call_soon(self._after_hooks)
            return True
        except Exception:  # noqa: BLE001
            self._fail("hold")
            return False

    def errored(self, flow: http.HTTPFlow, cap) -> None:
        """The error hook of a stream still streaming: name a client hang-up, cut to what was delivered."""
        if flow.client_conn.alpn != b"h2":
            return
        try:
            conn = self._conns.get(flow.client_conn.id)
            if conn is None or conn.h2 is None:
                return
            message = flow.error.msg if flow.error else ""
            client_only = flow.server_conn.alpn != b"h2"  # else mitmproxy's words may mean the upstream
            reset = conn.resets.pop(flow.id, None)
            if reset is not None:  # seen by the frame tap, with the bytes still unsent then
                code, unsent = reset
                message = f"stream reset by client ({_code_name(code)}) before its end was written"
            elif client_only and message.startswith("stream reset by client"):
                unsent = 0  # mitmproxy has dropped the send buffer: every forwarded byte is kept
            elif client_only and message.startswith(_CONNECTION_CLOSED):
                stream_id = conn.stream_id_of(flow)
                unsent = conn.unsent(stream_id) if stream_id is not None else 0
            else:
                return
            cap.error_msg = f"{HANG_UP_PREFIX}{message})"
            if unsent:
                keep_delivered(cap, cap.captured_bytes - unsent)
            self.hang_ups += 1
        except Exception:  # noqa: BLE001
            self._fail("errored")

    def flush(self) -> None:
        """Shutdown: file every row whose end was delivered; the others stay live (they end as shutdown)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        grace, self._grace = self._grace, deque()
        for held in grace:
            if not held.done:
                self._settle(held)
        self._new.clear()
        self._pending.clear()
        self._conns.clear()

    # -- internals -------------------------------------------------------------------------
    def _after_hooks(self) -> None:
        """Runs once the response hooks of this loop turn are over: mitmproxy has then written each end
        (or buffered it behind the client's window, or seen the stream reset)."""
        self._after_hooks_due = False
        new, self._new = self._new, []
        try:
            now = time.monotonic()
            for held in new:
                self._advance(held, now)
        except Exception:  # noqa: BLE001
            self._fail("after_hooks")
            for held in new:
                self._settle(held)
        self._schedule()

    def _sweep(self) -> None:
        self._timer = None
        try:
            now = time.monotonic()
            grace = self._grace
            while grace and (grace[0].done or grace[0].deadline <= now):
                held = grace.popleft()
                if not held.done:
                    self._settle(held)
            for held in list(self._pending.values()):
                self._advance(held, now)
        except Exception:  # noqa: BLE001
            self._fail("sweep")
            for held in [*self._grace, *self._pending.values()]:
                self._settle(held)
            self._grace.clear()
            self._pending.clear()
        self._schedule()

    def _schedule(self) -> None:
        if self._timer is None and (self._grace or self._pending):
            self._timer = asyncio.get_running_loop().call_later(SWEEP_S, self._sweep)

    def _advance(self, held: _Held, now: float, connection_gone: bool = False) -> None:
        """Look at a held stream: delivered its end (wait out the grace), reset, lost, or still waiting."""
        if held.done:
            return
        stream = held.stream
        closed_by = stream.closed_by
        if closed_by in _ENDED or stream.state_machine.state is _HALF_CLOSED_LOCAL:
            self._pending.pop(id(held), None)
            if connection_gone:  # no reset can come any more
                self._settle(held)
            elif held.deadline is None:
                held.deadline = now + GRACE_S
                self._grace.append(held)
            return
        conn = held.conn
        if closed_by is _RECV_RST:  # reset while the response hook was pending, or not seen by the tap
            code, unsent = conn.resets.pop(held.flow_id, (None, held.unsent))
            name = "" if code is None else f" ({_code_name(code)})"
            self._hang_up(held, f"stream reset by client{name} before its end was written", unsent)
        elif closed_by is _SEND_RST:  # mitmproxy reset it (a killed flow): not the client's doing
            self._hang_up(held, "stream reset by the proxy before its end was written", 0, by_client=False)
        elif connection_gone or stream.closed or not conn.client.state & _CAN_WRITE:
            self._hang_up(
                held, "connection lost before the stream's end was written", conn.unsent(held.stream_id)
            )
        else:
            held.unsent = conn.unsent(held.stream_id)
            self._pending[id(held)] = held

    def _on_reset(self, conn: _Conn, stream_id: int, code: int) -> None:
        """A RST_STREAM from the client, seen before mitmproxy and h2 handle it (its send buffer intact)."""
        held = conn.held.get(stream_id)
        if held is not None:
            if not held.done:
                stream = held.stream
                after = stream.closed_by in _ENDED or stream.state_machine.state is _HALF_CLOSED_LOCAL
                unsent = 0 if after else conn.unsent(stream_id)
                when = "after" if after else "before"
                self._hang_up(
                    held, f"stream reset by client ({_code_name(code)}) {when} its end was written", unsent
                )
            return
        stream = conn.http.streams.get(stream_id) if conn.http is not None else None
        flow = getattr(stream, "flow", None)
        if flow is not None and flow.live:  # still streaming: the error hook follows
            if len(conn.resets) > 1024:
                conn.resets.clear()
            conn.resets[flow.id] = (code, conn.unsent(stream_id))

    def _hang_up(self, held: _Held, reason: str, unsent: int, by_client: bool = True) -> None:
        _as_hang_up(held.cap, reason, unsent, by_client)
        self.hang_ups += by_client
        self._settle(held)

    def _settle(self, held: _Held) -> None:
        if held.done:
            return
        held.done = True
        self._pending.pop(id(held), None)
        held.conn.held.pop(held.stream_id, None)
        try:
            held.file(held.flow_id)
        except Exception:  # noqa: BLE001
            self._fail("file")

    def _release(self, conn: _Conn) -> None:
        for held in list(conn.held.values()):
            self._settle(held)

    def _fail(self, where: str) -> None:
        if not self._failed:
            message = "llmreplay recorder: HTTP/2 stream watch failed in %s; rows are filed as they are"
            log.warning(message, where, exc_info=True)
        self._failed = True


def _as_hang_up(cap, reason: str, unsent: int, by_client: bool = True) -> None:
    cap.outcome = "error"
    cap.error_msg = f"{HANG_UP_PREFIX}{reason})" if by_client else f"HTTP/2 {reason}"
    cap.server_connected = True
    if unsent:
        keep_delivered(cap, cap.captured_bytes - unsent)


def _code_name(code: int) -> str:
    try:
        return h2.errors.ErrorCodes(code).name
    except ValueError:
        return str(code)


def _tap_resets(h2_conn, on_reset: Callable[[int, int], None]) -> bool:
    """Call on_reset(stream id, error code) for each RST_STREAM the client sends, before h2 handles it.

    The one place that reaches into mitmproxy's HTTP/2 stack: h2's per-connection frame dispatch table
    (h2/connection.py, H2Connection._frame_dispatch_table, used by _receive_frame) gets a wrapper for
    RstStreamFrame that calls the original handler unchanged. Only for mitmproxy 12 with h2 4, where
    this was read and tested; False (no tap) otherwise.
    """
    table = getattr(h2_conn, "_frame_dispatch_table", None)
    if not _TAP_VERSIONS or not isinstance(table, dict) or not callable(table.get(RstStreamFrame)):
        return False
    original = table[RstStreamFrame]

    def receive_rst_stream(frame):
        try:
            on_reset(frame.stream_id, frame.error_code)
        except Exception:  # noqa: BLE001 - the frame must be handled whatever happens here
            log.debug("llmreplay recorder: RST_STREAM tap failed", exc_info=True)
        return original(frame)

    table[RstStreamFrame] = receive_rst_stream
    return True
