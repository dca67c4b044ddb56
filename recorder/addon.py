"""The mitmproxy addon: stamps LLM requests and taps their streams, journals them; a converter process does the rest.

Use as `mitmdump --mode reverse:URL -s recorder/addon.py --set llmreplay_out=DIR`, or through
`llmreplay record`. The only module of the project that talks to mitmproxy's hook API.
"""

from __future__ import annotations

import asyncio
import fnmatch
import logging
import secrets
import time
from collections.abc import Sequence

from mitmproxy import ctx, exceptions, http

from llmreplay.errors import BadInput
from llmreplay.options import declared
from llmreplay.wire.endpoints import endpoint_for_path
from recorder.capture import Capture
from recorder.config import RecorderConfig, option_names
from recorder.converter_spec import ConverterSpec
from recorder.h2_streams import H2StreamWatch
from recorder.journal import Journal
from recorder.keys import keyed_hash, load_or_create_key
from recorder.monitor import LagMonitor
from recorder.spool import SPOOL_DIR, SpoolLock, private_dirs
from recorder.stop_report import StopReport
from recorder.supervisor import ConverterSupervisor

log = logging.getLogger("llmreplay.recorder")

OPTION_PREFIX = "llmreplay_"
_REQUEST_HEADERS = frozenset((b"authorization", b"api-key", b"x-api-key", b"content-encoding"))
_RESPONSE_HEADERS = frozenset(
    (b"content-type", b"content-encoding", b"retry-after", b"content-length", b"transfer-encoding")
)
CONVERTER_STOP_TIMEOUT_S = 120.0
IMPAIRED_LOG_S = 60.0  # one CRITICAL line a minute while filing is impaired


class Recorder:
    def __init__(self) -> None:
        self.config: RecorderConfig | None = None
        self.live: dict[str, Capture] = {}  # insertion order == arrival order: the first is the oldest
        self.h2_streams = H2StreamWatch()  # HTTP/2 rows wait for their stream's end (recorder/h2_streams.py)
        self.addons = [self.h2_streams]  # a child addon: mitmproxy calls its hooks too
        self.journal: Journal | None = None  # set while recording
        self.converter: ConverterSupervisor | None = None
        self.startup_error: str | None = None
        self.stop_report: StopReport | None = None
        self._lock: SpoolLock | None = None
        self._key = b""
        self._key_hashes: dict[str, str] = {}
        self._endpoints: dict[str, str] = {}  # URL path -> endpoint name, remembered
        self._request_headers = _REQUEST_HEADERS
        self._session_header = b""
        self.seen = 0
        self.passed_through = 0
        self.lag = LagMonitor()
        self._tasks: list[asyncio.Task] = []
        self._run_token = secrets.token_hex(4)
        self._exact_paths: frozenset[str] = frozenset()
        self._glob_paths: tuple[str, ...] = ()
        # wall clock read once; every arrival_time is this anchor plus a monotonic interval
        self._anchor_unix_ns = time.time_ns()
        self._anchor_ns = time.perf_counter_ns()

    # -- options ---------------------------------------------------------------------------
    def load(self, loader) -> None:
        for item in declared(RecorderConfig):  # help and default from the field, as the CLI's flags
            default = item.default
            kind = type(default)
            if isinstance(default, tuple):
                kind, default = Sequence[str], list(default)
            loader.add_option(OPTION_PREFIX + item.name, kind, default, "llmreplay: " + item.option.help)

    def configure(self, updated: set[str]) -> None:
        if not any(name.startswith(OPTION_PREFIX) for name in updated):
            return
        values = {name: getattr(ctx.options, OPTION_PREFIX + name) for name in option_names()}
        values["paths"] = tuple(values["paths"])
        config = RecorderConfig(**values)
        if not config.out:
            self.config = None
            return
        if self.journal is not None and config != self.config:
            raise exceptions.OptionsError(
                "llmreplay_* options cannot change while recording; restart the recorder"
            )
        try:
            config.validated()
            self._key = load_or_create_key(config.key_file)
        except BadInput as exc:
            raise exceptions.OptionsError(str(exc)) from None
        self.config = config
        self._exact_paths = frozenset(p for p in config.paths if not _is_glob(p))
        self._glob_paths = tuple(p for p in config.paths if _is_glob(p))
        self._session_header = config.session_header.lower().encode()
        self._request_headers = _REQUEST_HEADERS | {self._session_header}

    # -- lifecycle -------------------------------------------------------------------------
    def running(self) -> None:
        if self.config is None:
            log.warning("llmreplay recorder: llmreplay_out is not set, so nothing is recorded")
            return
        try:
            self._start_recording(self.config)
        except BadInput as exc:
            self.startup_error = str(exc)
            log.critical("llmreplay recorder: %s", exc)
            self._release()
            ctx.master.shutdown()
            return
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self.lag.run()), loop.create_task(self._tick())]
        log.info(
            "llmreplay recorder: writing %s traces to %s (converter pid %s)",
            "content" if self.config.content else "shape",
            self.config.out,
            self.converter.pid,
        )

    def _start_recording(self, config: RecorderConfig) -> None:
        """Lock the directory, open the journal, then start the converter (it recovers earlier leftovers)."""
        import os
        from pathlib import Path

        out_dir = Path(config.out).expanduser()
        private_dirs(out_dir, config.content)
        self._lock = SpoolLock(out_dir / SPOOL_DIR)
        journal = Journal(out_dir / SPOOL_DIR, self._run_token, config.flush_interval_s, config.spool_limit_bytes)
        journal.start()
        self.journal = journal
        spec = ConverterSpec(
            out_dir=str(out_dir),
            run_token=self._run_token,
            parent_pid=os.getpid(),
            tokenizer=config.tokenizer,
            key=self._key,
            block_size=config.block_size,
            content=config.content,
            session_from_user=config.session_from_user,
            max_sessions=config.max_sessions,
            flush_interval_s=config.flush_interval_s,
            rotate_s=config.rotate_seconds,
            rotate_bytes=config.rotate_bytes,
            stats_interval_s=config.stats_interval_s,
            max_request_bytes=config.max_request_bytes,
            spool_limit_bytes=config.spool_limit_bytes,
        )
        self.converter = ConverterSupervisor(spec)
        self.converter.start()

    def _release(self) -> None:
        if self.journal is not None:
            self.journal.close()
            self.journal = None
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def done(self) -> None:
        """Shutdown (or a script reload): in-flight requests are recorded as 'shutdown', then all is filed."""
        for task in self._tasks:
            task.cancel()
        if self.journal is None:
            return
        self.h2_streams.flush()  # settles HTTP/2 rows whose end was delivered; the rest stay live
        shutdown = len(self.live)
        for cap in self.live.values():
            cap.outcome = "shutdown"
            cap.end_ns = cap.end_ns or time.perf_counter_ns()
            self._finish(cap)  # a pending one: journaled at its [DONE] or response hook, amended
        self.live.clear()
        ended = self.journal.close()  # the end-of-run marker the converter waits for
        filed = ended and self.converter.stop(CONVERTER_STOP_TIMEOUT_S)
        self.stop_report = StopReport.of(self, shutdown, filed)
        self._release()
        (log.info if self.stop_report.ok else log.critical)("llmreplay recorder stopped: %s", self.stop_report)

    def counters(self) -> dict:
        journal = self.journal
        return {
            "seen": self.seen,
            "journaled": journal.captures_written if journal else 0,
            "dropped": journal.dropped if journal else 0,
            "live": len(self.live),
            "journal_backlog_bytes": journal.disk_bytes if journal else 0,
            "passed_through": self.passed_through,
            "converter_restarts": self.converter.restarts if self.converter else 0,
        }

    async def _tick(self) -> None:
        """Watermark into the journal every flush interval, converter health too; counters and lag less often.

        Never stops the proxy: when filing is impaired it says so once a minute and carries on.
        """
        config = self.config
        last_stats = last_alarm = time.monotonic() - IMPAIRED_LOG_S
        while True:
            await asyncio.sleep(config.flush_interval_s)
            try:
                self.journal.tick(self._watermark_unix_ns(config.reorder_window_s))
                self.converter.check()
                now = time.monotonic()
                impaired = self._impairment()
                if impaired and now - last_alarm >= IMPAIRED_LOG_S:
                    last_alarm = now
                    log.critical("llmreplay recorder: filing impaired (%s); forwarding goes on. %s",
                                 impaired, self.counters())  # fmt: skip
                if now - last_stats >= config.stats_interval_s:
                    last_stats = now
                    log.info("llmreplay recorder: %s loop_lag_ms=%s", self.counters(), self.lag.take_summary_ms())
            except Exception:  # noqa: BLE001 - the tick must outlive any surprise
                log.exception("llmreplay recorder: tick failed")

    def _impairment(self) -> str | None:
        journal, converter = self.journal, self.converter
        if journal.impaired:
            return f"{journal.impaired}; {journal.dropped} captures dropped so far"
        if not converter.up:
            return f"the converter is down: {converter.last_problem or 'starting'}"
        return None

    def _watermark_unix_ns(self, window_s: float) -> int:
        now = self._unix_ns(time.perf_counter_ns())
        oldest = next(iter(self.live.values()), None)
        floor = now - int(window_s * 1e9)
        return now if oldest is None else max(oldest.arrival_unix_ns, floor)

    def _unix_ns(self, mono_ns: int) -> int:
        return self._anchor_unix_ns + (mono_ns - self._anchor_ns)

    # -- flow hooks ------------------------------------------------------------------------
    def requestheaders(self, flow: http.HTTPFlow) -> None:
        if self.journal is None:
            return
        request = flow.request
        path = request.path.split("?", 1)[0]
        if request.method != "POST" or not self._recorded(path):
            self.passed_through += 1
            return
        now = time.perf_counter_ns()
        self.seen += 1
        cap = Capture(
            f"{self._run_token}-{self.seen}",
            self._endpoint(path),
            now,
            self._unix_ns(now),
            self.config.max_capture_bytes,
        )
        found = _first_values(request.headers.fields, self._request_headers)
        auth = found.get(b"authorization", "")
        api_key = auth[7:].strip() if auth[:7].lower() == "bearer " else auth
        api_key = api_key or found.get(b"api-key") or found.get(b"x-api-key")
        if api_key:  # hashed here, so the journal never holds the key itself
            cap.api_key_hash = self._api_key_hash(api_key)
        cap.session_value = found.get(self._session_header)
        cap.request_encoding = found.get(b"content-encoding")
        self.live[flow.id] = cap

    def request(self, flow: http.HTTPFlow) -> None:
        request = flow.request
        if request.http_version == "HTTP/2.0":
            _frame_h2_body_for_http1(request)
        cap = self.live.get(flow.id)
        if cap is None:
            return
        if request.raw_content is None:
            cap.request_error = (
                "request body was streamed by mitmproxy (stream_large_bodies is set), so not parsed"
            )
        else:  # as received: a compressed body is decoded in the converter, bounded (recorder/decoding.py)
            cap.request_body = request.raw_content

    def responseheaders(self, flow: http.HTTPFlow) -> None:
        cap = self.live.get(flow.id)
        response = flow.response
        if cap is None:
            if self.config is not None and self.config.stream_unrecorded and not response.stream:
                response.stream = True
            return
        cap.headers_ns = time.perf_counter_ns()
        cap.status = response.status_code
        found = _first_values(response.headers.fields, _RESPONSE_HEADERS)
        cap.content_type = found.get(b"content-type", "").lower()
        cap.content_encoding = found.get(b"content-encoding")
        cap.retry_after = found.get(b"retry-after")
        response.stream = cap.tap
        length = _content_length(found, response.status_code)
        if flow.client_conn.alpn == b"h2":
            return  # HTTP/2: settled by h2_streams once its end is delivered
        flow_id = flow.id
        if length == 0:  # the head is the last byte the client gets: file before it goes out
            cap.end_ns = cap.headers_ns
            self._file_early(cap, flow_id)
        elif length is not None:
            cap.remaining = length
            cap.on_last_byte = lambda c: self._file_early(c, flow_id)
        elif cap.content_type.startswith("text/event-stream") and cap.content_encoding is None:
            cap.watch_done = True
            cap.on_last_byte = self._journal_at_done

    def _journal_at_done(self, cap: Capture) -> None:
        """A stream's [DONE] is in the read being forwarded: journal it as the success it most likely is."""
        cap.outcome, cap.end_ns = "response", cap.last_read_ns  # the chunked end, if it comes, amends both
        self._journal_pending(cap)

    def _journal_pending(self, cap: Capture) -> None:
        """Journal a capture whose outcome may still change (at its [DONE], or an HTTP/2 stream whose end
        is not delivered yet); `_finish` or `_settle` amends it."""
        if not cap.pending:
            cap.pending = True
            cap.pending = self.journal.submit(cap)

    def _file_early(self, cap: Capture, flow_id: str) -> None:
        """File a Content-Length response from the tap of its last body bytes, before they are forwarded
        (the `response` hook comes after the client has them all); the hook then finds nothing live."""
        if self.live.pop(flow_id, None) is cap:
            cap.outcome = "response"
            self.journal.submit(cap)

    def response(self, flow: http.HTTPFlow) -> None:
        cap = self.live.get(flow.id)  # stays live until filed
        if cap is None:
            return
        if cap.status is None:  # answered by another addon, without a responseheaders hook for us
            cap.status = flow.response.status_code
            cap.content_type = flow.response.headers.get("content-type", "").lower()
            cap.reads = [(time.perf_counter_ns(), flow.response.raw_content or b"")]
        cap.end_ns = cap.end_ns or time.perf_counter_ns()
        cap.outcome = "response"
        if self.h2_streams.hold(flow, cap, self._settle):  # HTTP/2: a reset may still follow
            self._journal_pending(cap)  # journaled now, before the client has the end; settled by AMEND
            return
        del self.live[flow.id]
        self._finish(cap)

    def _finish(self, cap: Capture) -> None:
        """Journal a finished capture, or amend it when it was journaled pending (at its [DONE])."""
        if cap.pending:
            self.journal.amend(cap)
        else:
            self.journal.submit(cap)

    def _settle(self, flow_id: str) -> None:
        """An HTTP/2 stream's outcome is final (its end delivered, or the client hung up): amend its row."""
        cap = self.live.pop(flow_id, None)
        if cap is not None and cap.pending and self.journal is not None:
            self.journal.amend(cap)

    def error(self, flow: http.HTTPFlow) -> None:
        cap = self.live.pop(flow.id, None)
        if cap is None:
            return
        cap.outcome = "error"
        cap.error_msg = _error_message(flow)
        cap.server_connected = flow.server_conn.timestamp_tcp_setup is not None
        self.h2_streams.errored(flow, cap)  # an HTTP/2 hang-up: named, and cut to what was delivered
        self._finish(cap)

    def _api_key_hash(self, api_key: str) -> str:
        """Keyed hashes of the few keys a gateway sees, remembered: hashing each request costs µs on the loop."""
        cached = self._key_hashes.get(api_key)
        if cached is None:
            if len(self._key_hashes) >= 4096:
                self._key_hashes.clear()
            cached = self._key_hashes[api_key] = keyed_hash(self._key, api_key, "k")
        return cached

    def _endpoint(self, path: str) -> str:
        endpoint = self._endpoints.get(path)
        if endpoint is None:
            if len(self._endpoints) >= 1024:
                self._endpoints.clear()
            endpoint = self._endpoints[path] = endpoint_for_path(path)
        return endpoint

    def _recorded(self, path: str) -> bool:
        return path in self._exact_paths or any(fnmatch.fnmatchcase(path, g) for g in self._glob_paths)


def _frame_h2_body_for_http1(request: http.Request) -> None:
    """HTTP/2 clients may omit content-length (DATA frames carry the framing); mitmproxy then sends the
    body to an HTTP/1.1 upstream without framing, and the upstream reads an empty body."""
    if request.raw_content is not None and "content-length" not in request.headers:
        if "transfer-encoding" not in request.headers:
            request.headers["content-length"] = str(len(request.raw_content))


# mitmproxy's messages when an HTTP/2 connection ends (TCP close or GOAWAY); they do not say which peer
_H2_CONNECTION_CLOSED = ("peer closed connection", "HTTP/2 connection closed")


def _error_message(flow: http.HTTPFlow) -> str:
    """The flow's error, naming the client when an HTTP/2 client hung up: mitmproxy's wording is
    the same for both peers, but with an HTTP/1.1 upstream only the client side can speak HTTP/2."""
    message = flow.error.msg if flow.error else "unknown error"
    client_h2, server_h2 = flow.client_conn.alpn == b"h2", flow.server_conn.alpn == b"h2"
    if client_h2 and not server_h2 and message.startswith(_H2_CONNECTION_CLOSED):
        return f"client disconnected (HTTP/2: {message})"
    return message


def _content_length(found: dict[bytes, str], status: int) -> int | None:
    """The body length the client will count to, or None when it ends otherwise (chunked, close)."""
    if status in (204, 304):
        return 0
    if b"transfer-encoding" in found:
        return None
    text = found.get(b"content-length", "")
    return int(text) if text.isdigit() and len(text) < 16 else None


def _first_values(fields, wanted: frozenset[bytes]) -> dict[bytes, str]:
    """The first value of each wanted header, in one pass over the raw fields (Headers.get costs
    a case-folding scan per call, and this runs for every request on the event loop)."""
    found: dict[bytes, str] = {}
    for name, value in fields:
        name = name.lower()
        if name in wanted and name not in found:
            found[name] = value.decode("utf-8", "backslashreplace")  # journaled as UTF-8: no lone surrogates
    return found


def _is_glob(pattern: str) -> bool:
    return any(c in pattern for c in "*?[")


addons = [Recorder()]
