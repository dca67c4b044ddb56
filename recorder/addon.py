"""The mitmproxy addon: stamps LLM requests and taps their streams; the writer thread does the rest.

Use as `mitmdump --mode reverse:URL -s recorder/addon.py --set llmreplay_out=DIR`, or through
`llmreplay record`. The only module of the project that talks to mitmproxy's hook API.
"""

from __future__ import annotations

import asyncio
import dataclasses
import fnmatch
import logging
import secrets
import time
from collections.abc import Sequence

from mitmproxy import ctx, exceptions, http

from llmreplay.errors import BadInput
from llmreplay.tokenizers import load_tokenizer
from llmreplay.trace_format import TraceMeta
from recorder.capture import Capture
from recorder.config import RecorderConfig, option_names
from recorder.keys import load_or_create_key
from recorder.monitor import LagMonitor
from recorder.record_builder import BuildSettings, RecordBuilder
from recorder.request_shape import endpoint_for_path
from recorder.sessions import SessionTracker
from recorder.writer import RecordWriter, WriterSettings

log = logging.getLogger("llmreplay.recorder")

OPTION_PREFIX = "llmreplay_"
_SECRET_HEADERS = ("api-key", "x-api-key")


class Recorder:
    def __init__(self) -> None:
        self.config: RecorderConfig | None = None
        self.live: dict[str, Capture] = {}  # insertion order == arrival order: the first is the oldest
        self.writer: RecordWriter | None = None
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
        for field in dataclasses.fields(RecorderConfig):
            default = field.default
            kind = type(default)
            if isinstance(default, tuple):
                kind, default = Sequence[str], list(default)
            loader.add_option(
                OPTION_PREFIX + field.name, kind, default, _OPTION_HELP.get(field.name, field.name)
            )

    def configure(self, updated: set[str]) -> None:
        if not any(name.startswith(OPTION_PREFIX) for name in updated):
            return
        values = {name: getattr(ctx.options, OPTION_PREFIX + name) for name in option_names()}
        values["paths"] = tuple(values["paths"])
        config = RecorderConfig(**values)
        if not config.out:
            self.config = None
            return
        if self.writer is not None and config != self.config:
            raise exceptions.OptionsError(
                "llmreplay_* options cannot change while recording; restart the recorder"
            )
        try:
            config.validated()
            self._builder = self._make_builder(config)
        except BadInput as exc:
            raise exceptions.OptionsError(str(exc)) from None
        self.config = config
        self._exact_paths = frozenset(p for p in config.paths if not _is_glob(p))
        self._glob_paths = tuple(p for p in config.paths if _is_glob(p))

    def _make_builder(self, config: RecorderConfig) -> RecordBuilder:
        settings = BuildSettings(
            tokenizer=load_tokenizer(config.tokenizer),
            key=load_or_create_key(config.key_file),
            block_size=config.block_size,
            content=config.content,
            session_from_user=config.session_from_user,
        )
        return RecordBuilder(settings, SessionTracker(config.max_sessions))

    # -- lifecycle -------------------------------------------------------------------------
    def running(self) -> None:
        if self.config is None:
            log.warning("llmreplay recorder: llmreplay_out is not set, so nothing is recorded")
            return
        from pathlib import Path

        config = self.config
        meta = TraceMeta(
            source="recorder",
            block_size=config.block_size,
            tokenizer=self._builder.settings.tokenizer.id,
            content=config.content,
            clock_domain="gateway",
        )
        settings = WriterSettings(
            out_dir=Path(config.out).expanduser(),
            meta=meta,
            flush_interval_s=config.flush_interval_s,
            rotate_s=config.rotate_seconds,
            rotate_bytes=config.rotate_bytes,
            run_token=self._run_token,
        )
        self.writer = RecordWriter(settings, self._builder)
        try:
            self.writer.start()
        except BadInput as exc:
            log.critical("llmreplay recorder: %s", exc)
            self.writer = None
            ctx.master.shutdown()
            return
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self.lag.run()), loop.create_task(self._tick())]
        log.info(
            "llmreplay recorder: writing %s traces to %s",
            "content" if config.content else "shape",
            config.out,
        )

    def done(self) -> None:
        """Shutdown (or a script reload): in-flight requests are recorded as 'shutdown', then all is flushed."""
        for task in self._tasks:
            task.cancel()
        if self.writer is None:
            return
        for cap in self.live.values():
            cap.outcome = "shutdown"
            cap.end_ns = cap.end_ns or time.perf_counter_ns()
            self.writer.submit(cap)
        self.live.clear()
        self.writer.close()
        log.info("llmreplay recorder stopped: %s", self.counters())
        self.writer = None

    def counters(self) -> dict:
        writer = self.writer
        return {
            "seen": self.seen,
            "recorded": writer.rows_spooled if writer else 0,
            "in_files": writer.rows_in_files if writer else 0,
            "parse_problems": writer.problems if writer else 0,
            "live": len(self.live),
            "writer_backlog": writer.backlog if writer else 0,
            "passed_through": self.passed_through,
        }

    async def _tick(self) -> None:
        """Watermark for the writer every flush interval; counters and lag every stats interval."""
        config = self.config
        last_stats = time.monotonic()
        while True:
            await asyncio.sleep(config.flush_interval_s)
            self.writer.tick(self._watermark_unix_ns(config.reorder_window_s))
            if self.writer.failure is not None:
                log.critical(
                    "llmreplay recorder: writer failed (%s); stopping the proxy", self.writer.failure
                )
                ctx.master.shutdown()  # unrecorded traffic is worse than a stopped recorder
                return
            if time.monotonic() - last_stats >= config.stats_interval_s:
                last_stats = time.monotonic()
                log.info("llmreplay recorder: %s loop_lag_ms=%s", self.counters(), self.lag.take_summary_ms())

    def _watermark_unix_ns(self, window_s: float) -> int:
        now = self._unix_ns(time.perf_counter_ns())
        oldest = next(iter(self.live.values()), None)
        floor = now - int(window_s * 1e9)
        return now if oldest is None else max(oldest.arrival_unix_ns, floor)

    def _unix_ns(self, mono_ns: int) -> int:
        return self._anchor_unix_ns + (mono_ns - self._anchor_ns)

    # -- flow hooks ------------------------------------------------------------------------
    def requestheaders(self, flow: http.HTTPFlow) -> None:
        if self.writer is None:
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
            endpoint_for_path(path),
            now,
            self._unix_ns(now),
            self.config.max_capture_bytes,
        )
        headers = request.headers
        auth = headers.get("authorization", "")
        cap.api_key = auth[7:].strip() if auth[:7].lower() == "bearer " else (auth or None)
        for name in _SECRET_HEADERS:
            cap.api_key = cap.api_key or headers.get(name)
        if self.config.session_header:
            cap.session_value = headers.get(self.config.session_header)
        self.live[flow.id] = cap

    def request(self, flow: http.HTTPFlow) -> None:
        cap = self.live.get(flow.id)
        if cap is None:
            return
        request = flow.request
        if request.raw_content is None:
            cap.request_error = (
                "request body was streamed by mitmproxy (stream_large_bodies is set), so not parsed"
            )
        elif "content-encoding" in request.headers:
            cap.request_body = request.get_content(strict=False)  # rare; decoding here is the only option
        else:
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
        headers = response.headers
        cap.content_type = headers.get("content-type", "").lower()
        cap.content_encoding = headers.get("content-encoding")
        cap.retry_after = headers.get("retry-after")
        response.stream = cap.tap

    def response(self, flow: http.HTTPFlow) -> None:
        cap = self.live.pop(flow.id, None)
        if cap is None:
            return
        if cap.status is None:  # answered by another addon, without a responseheaders hook for us
            cap.status = flow.response.status_code
            cap.content_type = flow.response.headers.get("content-type", "").lower()
            cap.reads = [(time.perf_counter_ns(), flow.response.raw_content or b"")]
        cap.end_ns = cap.end_ns or time.perf_counter_ns()
        cap.outcome = "response"
        self.writer.submit(cap)

    def error(self, flow: http.HTTPFlow) -> None:
        cap = self.live.pop(flow.id, None)
        if cap is None:
            return
        cap.outcome = "error"
        cap.error_msg = flow.error.msg if flow.error else "unknown error"
        cap.server_connected = flow.server_conn.timestamp_tcp_setup is not None
        self.writer.submit(cap)

    def _recorded(self, path: str) -> bool:
        return path in self._exact_paths or any(fnmatch.fnmatchcase(path, g) for g in self._glob_paths)


def _is_glob(pattern: str) -> bool:
    return any(c in pattern for c in "*?[")


_OPTION_HELP = {
    "out": "llmreplay: directory for trace files (recording is off when empty)",
    "content": "llmreplay: also record message, tool and response content (for anonymization)",
    "tokenizer": "llmreplay: tokenizer for counts and prefix hashes when the server sends no usage",
    "key_file": "llmreplay: secret key file for keyed hashes (created 0600 if absent; never in the trace)",
    "block_size": "llmreplay: tokens per prefix-hash block",
    "paths": "llmreplay: URL paths recorded (exact or glob); other paths pass through unrecorded",
    "session_header": "llmreplay: request header naming the session (conversation)",
    "session_from_user": "llmreplay: use the request's `user` field as the session when no header names one",
    "max_sessions": "llmreplay: open sessions remembered for session inference (LRU)",
    "rotate": "llmreplay: start a new Parquet file after this time (1h) and/or size (256MB)",
    "flush_interval_s": "llmreplay: seconds between spool fsyncs and watermark ticks (at most 1)",
    "stats_interval_s": "llmreplay: seconds between counter/lag log lines",
    "max_capture_bytes": "llmreplay: response bytes kept per request for parsing (the client always gets all)",
    "reorder_window_s": "llmreplay: longest a finished row waits for older live requests before it is filed",
    "stream_unrecorded": "llmreplay: stream (not buffer) responses of paths that are not recorded",
}

addons = [Recorder()]
