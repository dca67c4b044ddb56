"""The proxy's side of the converter process: start it, restart it with backoff whenever it dies, wait
for it at stop. The proxy never stops because filing is impaired, and loses nothing meanwhile
(docs/design/recorder-journal.md)."""

from __future__ import annotations

import logging
import multiprocessing
import signal
import time

from llmreplay.errors import BadInput
from recorder.converter_spec import ConverterSpec

log = logging.getLogger("llmreplay.recorder")

START_TIMEOUT_S = 120.0  # tokenizer load plus waiting for an orphaned converter to let go
FIRST_BACKOFF_S = 1.0
MAX_BACKOFF_S = 60.0
HEALTHY_AFTER_S = 60.0  # a converter up this long resets the backoff


class ConverterSupervisor:
    def __init__(self, spec: ConverterSpec):
        self.spec = spec
        self._context = multiprocessing.get_context("spawn")  # never fork a process running threads
        self._process = None
        self._pipe = None  # the child's messages: ("ready", tokenizer id), ("error", text), ("done", stats)
        self._ready = False
        self._started_at = 0.0
        self._backoff_s = FIRST_BACKOFF_S
        self._restart_at: float | None = None  # set while the converter is down
        self.down_since: float | None = None
        self.last_problem: str | None = None
        self.restarts = 0
        self.final_stats: dict = {}

    def start(self) -> None:
        """Start the converter and wait until it is ready. BadInput when it refuses the settings
        (tokenizer, directory lock); any other failure is retried later while the proxy forwards."""
        self._spawn()
        if not self._pipe.poll(START_TIMEOUT_S):
            self._process.kill()
            self._process.join(5)
            self._down(f"not ready after {START_TIMEOUT_S:g}s", at_start=True)
            return
        message = self._receive()
        if message is not None and message[0] == "error":
            self._process.join(5)
            raise BadInput(message[1])
        if not self._ready:
            self._process.join(5)
            self._down(f"exited at start (code {self._process.exitcode})", at_start=True)

    def check(self) -> None:
        """Called every flush interval on the event loop; never blocks (a non-blocking waitpid and poll)."""
        now = time.monotonic()
        if self._restart_at is not None:
            if now >= self._restart_at:
                self._spawn()
            return
        if self._process.is_alive():
            if not self._ready and self._pipe.poll(0):
                message = self._receive()
                if message is not None and message[0] == "error":
                    self._process.join(1)
                    self._down(message[1])
            elif self._ready and now - self._started_at >= HEALTHY_AFTER_S:
                self._backoff_s = FIRST_BACKOFF_S
            return
        self._receive_pending()
        self._down(f"died (exit code {self._process.exitcode})")

    def stop(self, timeout_s: float) -> bool:
        """After the journal's end-of-run marker: wait for the converter to file everything. True when it did.

        A converter that is down, or dies now, is replaced (up to three times) to finish the journal.
        """
        deadline = time.monotonic() + timeout_s
        for _ in range(3):
            if self._restart_at is not None or self._process.exitcode not in (None, 0):
                self._spawn()
            self._process.join(max(0.0, deadline - time.monotonic()))
            self._receive_pending()
            if self._process.exitcode == 0:
                return True
            if self._process.is_alive():
                log.critical("llmreplay recorder: the converter did not finish in %gs; stopping it", timeout_s)
                self._process.kill()
                self._process.join(5)
                return False
            stopped = self._process.exitcode == -signal.SIGTERM  # a service manager's stop reaches the group
            (log.warning if stopped else log.critical)(
                "llmreplay recorder: the converter %s at stop; starting another to finish the journal",
                "was stopped by SIGTERM" if stopped else f"died (exit code {self._process.exitcode})",
            )
        return False

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    @property
    def up(self) -> bool:
        return self._restart_at is None and self._ready

    def _down(self, why: str, at_start: bool = False) -> None:
        """The converter is not running: schedule the next start with exponential backoff.

        At start-up this is a warning: mitmproxy shuts down on an error logged while it starts.
        """
        now = time.monotonic()
        self.down_since = self.down_since or now
        self.last_problem = why
        self._restart_at = now + self._backoff_s
        (log.warning if at_start else log.critical)(
            "llmreplay recorder: the converter %s; restarting it in %gs. Forwarding goes on and nothing"
            " is lost: the journal keeps every capture until it is converted",
            why,
            self._backoff_s,
        )
        self._backoff_s = min(MAX_BACKOFF_S, self._backoff_s * 2)

    def _spawn(self) -> None:
        if self._process is not None:
            self.restarts += 1
        receiver, sender = self._context.Pipe(duplex=False)
        process = self._context.Process(
            target=_converter_main, args=(self.spec, sender), name="llmreplay-converter", daemon=False
        )
        process.start()
        sender.close()
        self._process, self._pipe, self._ready = process, receiver, False
        self._restart_at = None
        self._started_at = time.monotonic()

    def _receive(self) -> tuple | None:
        try:
            message = self._pipe.recv()
        except (EOFError, OSError):
            return None
        if message[0] == "ready":
            self._ready = True
            self.down_since = None
        elif message[0] == "done":
            self.final_stats = message[1]
        return message

    def _receive_pending(self) -> None:
        while self._pipe is not None and self._pipe.poll(0):
            if self._receive() is None:
                return


def _converter_main(spec: ConverterSpec, pipe) -> None:
    """The spawn target, importing the converter (pyarrow, tokenizers) in the child only."""
    from recorder.converter import run_converter

    run_converter(spec, pipe)
