"""The proxy's side of the converter process: start it, notice when it dies, restart it, wait for it at stop.

Nothing is lost when the converter dies: every capture is in the journal until the converter has
spooled its row, and a new converter starts from the oldest journal segment still on disk.
"""

from __future__ import annotations

import logging
import multiprocessing
import time
from collections import deque

from llmreplay.errors import BadInput
from recorder.converter_spec import ConverterSpec

log = logging.getLogger("llmreplay.recorder")

START_TIMEOUT_S = 120.0  # tokenizer load plus waiting for an orphaned converter to let go
MAX_RESTARTS = 3
RESTART_WINDOW_S = 60.0


class ConverterSupervisor:
    def __init__(self, spec: ConverterSpec):
        self.spec = spec
        self._context = multiprocessing.get_context("spawn")  # never fork a process running threads
        self._process = None
        self._ready = None
        self._restarts: deque[float] = deque()
        self.restarts = 0

    def start(self) -> str:
        """Start the converter and wait until it is ready; returns the tokenizer id. BadInput if it fails."""
        self._spawn()
        if not self._ready.poll(START_TIMEOUT_S):
            self._process.kill()
            raise BadInput(f"recorder converter: not ready after {START_TIMEOUT_S:g}s")
        try:
            kind, text = self._ready.recv()
        except EOFError:
            raise BadInput(f"recorder converter exited at start (code {self._process.exitcode})") from None
        if kind == "error":
            self._process.join(5)
            raise BadInput(text)
        return text

    def check(self) -> bool:
        """Called every flush interval on the event loop (a non-blocking waitpid). False: give up recording."""
        if self._process.is_alive():
            return True
        now = time.monotonic()
        while self._restarts and now - self._restarts[0] > RESTART_WINDOW_S:
            self._restarts.popleft()
        if len(self._restarts) >= MAX_RESTARTS:
            log.critical(
                "llmreplay recorder: the converter died %d times in %gs (last exit code %s); stopping the proxy."
                " The journal keeps every capture; the next start converts it",
                MAX_RESTARTS + 1,
                RESTART_WINDOW_S,
                self._process.exitcode,
            )
            return False
        log.critical(
            "llmreplay recorder: the converter process died (exit code %s); restarting it. Nothing is lost:"
            " its unfinished work is still in the journal",
            self._process.exitcode,
        )
        self._restarts.append(now)
        self.restarts += 1
        self._spawn()
        return True

    def stop(self, timeout_s: float) -> bool:
        """After the journal's end-of-run marker: wait for the converter to file everything. True when it did."""
        self._process.join(timeout_s)
        if self._process.exitcode == 0:
            return True
        if self._process.is_alive():
            log.critical("llmreplay recorder: the converter did not finish in %gs; stopping it", timeout_s)
            self._process.kill()
            self._process.join(5)
            return False
        log.critical("llmreplay recorder: the converter died at stop; starting one to finish the journal")
        self._spawn()
        self._process.join(timeout_s)
        return self._process.exitcode == 0

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    def _spawn(self) -> None:
        receiver, sender = self._context.Pipe(duplex=False)
        process = self._context.Process(
            target=_converter_main, args=(self.spec, sender), name="llmreplay-converter", daemon=False
        )
        process.start()
        sender.close()
        self._process, self._ready = process, receiver


def _converter_main(spec: ConverterSpec, ready) -> None:
    """The spawn target, importing the converter (pyarrow, tokenizers) in the child only."""
    from recorder.converter import run_converter

    run_converter(spec, ready)
