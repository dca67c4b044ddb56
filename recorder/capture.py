"""Per-request state filled on the proxy's event loop: stamps and raw bytes, nothing parsed.

The stream tap is the hottest code in the recorder (once per socket read of every stream), so it
only stamps the read and keeps a reference to the bytes; decoding and SSE parsing happen later
in the converter process, which replays the reads in order with their stamps.
"""

from __future__ import annotations

import time

_now_ns = time.perf_counter_ns


class Capture:
    """Mutable while the flow is live; handed to the journal once, then never touched here."""

    __slots__ = (
        "request_id",
        "endpoint",
        "arrival_ns",
        "arrival_unix_ns",
        "request_body",
        "request_error",
        "request_encoding",
        "api_key_hash",
        "session_value",
        "status",
        "content_type",
        "content_encoding",
        "retry_after",
        "headers_ns",
        "reads",
        "captured_bytes",
        "max_capture_bytes",
        "overflow",
        "last_read_ns",
        "end_ns",
        "error_msg",
        "server_connected",
        "outcome",
        "pending",
        "remaining",
        "watch_done",
        "on_last_byte",
    )

    def __init__(
        self, request_id: str, endpoint: str, arrival_ns: int, arrival_unix_ns: int, max_capture_bytes: int
    ):
        self.request_id = request_id
        self.endpoint = endpoint
        self.arrival_ns = arrival_ns  # monotonic (perf_counter_ns), for intervals
        self.arrival_unix_ns = arrival_unix_ns  # wall-clock anchor, for arrival_time only
        self.request_body: bytes | None = None
        self.request_error: str | None = None
        self.request_encoding: str | None = None  # the request body's content-encoding, decoded in the converter
        self.api_key_hash: str | None = None  # keyed at once: the key itself never leaves the flow
        self.session_value: str | None = None
        self.status: int | None = None
        self.content_type = ""
        self.content_encoding: str | None = None
        self.retry_after: str | None = None
        self.headers_ns: int | None = None
        self.reads: list[tuple[int, bytes]] = []
        self.captured_bytes = 0
        self.max_capture_bytes = max_capture_bytes
        self.overflow = False
        self.last_read_ns: int | None = None
        self.end_ns: int | None = None
        self.error_msg: str | None = None
        self.server_connected = False
        self.outcome = "live"  # live -> response | error | shutdown
        self.pending = False  # journaled before its outcome is final: an AMEND frame settles it (HTTP/2)
        self.remaining = -1  # body bytes still to come when the response has a Content-Length, else -1
        self.watch_done = False  # an SSE stream: a read holding `[DONE]` ends it for the client
        self.on_last_byte = None  # called from tap with the last body byte, before it is forwarded

    def tap(self, data: bytes) -> bytes:
        """mitmproxy's stream callable: observe one read and pass it through unchanged.

        Must never raise (mitmproxy would drop the chunk) and never return b"" before the end
        (that would end the client's response), so it returns `data` itself on every path.
        """
        try:
            now = _now_ns()
            if data:
                self.last_read_ns = now
                if self.captured_bytes < self.max_capture_bytes:
                    self.reads.append((now, data))
                    self.captured_bytes += len(data)
                else:
                    self.overflow = True
                if self.remaining > 0:
                    self.remaining -= len(data)
                    if self.remaining <= 0:  # the client gets these bytes after we return: file it first
                        self.end_ns = now
                        self.on_last_byte(self)
                elif self.watch_done and data.find(b"[DONE]") >= 0:
                    # SDKs hang up at [DONE], before the chunked end: journal it first (pending, the
                    # end of the body amends it); a marker split across two reads waits for the end
                    self.watch_done = False
                    self.on_last_byte(self)
            else:
                self.end_ns = now
        except Exception:  # noqa: BLE001 - the bytes must reach the client whatever happens here
            self.overflow = True
        return data

    @property
    def last_byte_ns(self) -> int | None:
        return self.end_ns or self.last_read_ns


# the scalars an AMEND frame may change: what an HTTP/2 stream's end (or hang-up) settles after the hook
AMENDED = ("outcome", "error_msg", "server_connected", "end_ns", "last_read_ns", "captured_bytes")


def keep_delivered(cap: Capture, delivered: int) -> None:
    """Cut the capture's reads to their first `delivered` bytes (the row is then built from those only)."""
    if cap.overflow or delivered >= sum(len(data) for _, data in cap.reads):
        return  # a capture cut at max_capture_bytes has no byte count to cut by
    kept: list[tuple[int, bytes]] = []
    total = 0
    for stamp, data in cap.reads:
        if total + len(data) > delivered:
            if delivered > total:
                kept.append((stamp, data[: delivered - total]))
            break
        kept.append((stamp, data))
        total += len(data)
    cap.reads = kept
    cap.captured_bytes = max(delivered, 0)
    cap.end_ns = None  # the end of the body never left
    cap.last_read_ns = kept[-1][0] if kept else None
