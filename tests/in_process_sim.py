"""`llmreplay sim` inside the test process: its server on an event loop of its own in a thread, on
the port the kernel picks (0). For tests where the sim being a separate process is not the point."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from pathlib import Path

from llmreplay.sim.config import build_config
from llmreplay.sim.run import serve

START_TIMEOUT_S = 60.0  # the first start in a process loads the tokenizer


class InProcessSim:
    """start() -> base URL; stop() publishes the ground-truth log (`log_path`) and joins the thread."""

    def __init__(self, profile: str | None = None, log_path: Path | None = None, **fields):
        self.log_path = log_path
        fields = {
            "host": "127.0.0.1",
            "port": 0,
            "log_path": None if log_path is None else str(log_path),
            **fields,
        }
        self.config = build_config(profile, fields)
        self.url = ""
        self._listening = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="in-process-sim", daemon=True)

    def start(self) -> str:
        self._thread.start()
        if not self._listening.wait(START_TIMEOUT_S) or self._error is not None:
            raise RuntimeError(f"in-process sim did not start: {self._error!r}")
        return self.url

    def stop(self) -> None:
        if self._loop is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout=30)

    def _run(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:  # handed to start(): a thread's exception reaches nobody else
            self._error = exc
            self._listening.set()

    async def _serve(self) -> None:
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        await serve(self.config, self._stop, self._on_listening)

    def _on_listening(self, port: int) -> None:
        self.url = f"http://127.0.0.1:{port}"
        self._listening.set()


@contextlib.contextmanager
def sims_in_process():
    """start(profile=None, **SimConfig fields) -> a started InProcessSim; every one is stopped at exit."""
    sims: list[InProcessSim] = []

    def start(profile: str | None = None, **fields) -> InProcessSim:
        sims.append(InProcessSim(profile, **fields))
        sims[-1].start()
        return sims[-1]

    try:
        yield start
    finally:
        for sim in sims:
            sim.stop()
