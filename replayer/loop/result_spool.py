"""A worker's finished requests go to disk during the run in marshal frames, not into a list held
until the end; the file appears only at `close` (a worker that dies leaves none, never a half-read
one). Why marshal and a writer thread: docs/design/replay-memory.md."""

from __future__ import annotations

import marshal
import os
import queue
import struct
import threading
from array import array
from collections.abc import Iterator
from pathlib import Path

from llmreplay.output_paths import publish
from llmreplay.redaction import scrubbed_excerpt
from replayer.loop.client import ERROR_EXCERPT_BYTES, Outcome
from replayer.loop.helper_threads import yield_to_loop

SPOOL_BATCH = 32
_FRAME = struct.Struct("<I")
# Outcome attributes kept for the results file, in tuple order after (plan index, due_ns).
_KEPT = tuple(name for name in Outcome.__slots__ if name not in ("on_wire", "stop_reason"))
_CHUNKS = _KEPT.index("chunk_offsets_ns")
_DETAIL = _KEPT.index("error_detail")


def fields(index: int, due_ns: int, outcome: Outcome | None, secrets: tuple[str, ...] = ()) -> tuple:
    """A finished request as plain values; `outcome` None: shed by the client. The error detail is
    decoded, scrubbed of `secrets` (and anything credential-like) and only then cut to the excerpt,
    here, before it can reach the disk."""
    if outcome is None:
        return (index, due_ns)
    values = [getattr(outcome, name) for name in _KEPT]
    if values[_DETAIL] is not None:
        values[_DETAIL] = scrubbed_excerpt(values[_DETAIL], secrets, ERROR_EXCERPT_BYTES)
    chunks = values[_CHUNKS]
    if chunks is not None:
        values[_CHUNKS] = (chunks if isinstance(chunks, array) else array("q", chunks)).tobytes()
    return (index, due_ns, *values)


def outcome_of(values: tuple) -> Outcome | None:
    """The Outcome `fields` was made from (None when shed), for the merge after the run."""
    if len(values) == 2:
        return None
    outcome = Outcome(0)
    for name, value in zip(_KEPT, values[2:], strict=True):
        setattr(outcome, name, value)
    if outcome.chunk_offsets_ns is not None:
        outcome.chunk_offsets_ns = array("q", outcome.chunk_offsets_ns)
    return outcome


class ResultSpool:
    """Collects (plan index, due_ns, Outcome) as the loop finishes requests; `append(Sent)` like a list."""

    def __init__(self, path: str | Path, secrets: tuple[str, ...] = ()):
        self.path = Path(path)
        self.secrets = secrets  # values scrubbed from error details (llmreplay.redaction.secret_values)
        self.partial_path = partial_path(self.path)
        self.count = 0
        self._batch: list[tuple] = []
        self._queue: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self._fd = os.open(self.partial_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        self._writer = threading.Thread(target=self._write, name="llmreplay-result-writer", daemon=True)
        self._writer.start()

    def append(self, sent) -> None:
        """`sent`: a replayer.loop.runner.Sent."""
        self._batch.append(fields(sent.plan.index, sent.due_ns, sent.outcome, self.secrets))
        self.count += 1
        if len(self._batch) >= SPOOL_BATCH:
            self._flush()

    def _flush(self) -> None:
        if self._batch:
            data = marshal.dumps(self._batch)
            self._batch = []
            self._queue.put(_FRAME.pack(len(data)) + data)

    def _write(self) -> None:
        yield_to_loop()
        while (frame := self._queue.get()) is not None:
            view = memoryview(frame)
            while view:
                view = view[os.write(self._fd, view) :]

    def close(self) -> None:
        """Write what is left and make the file appear under its name, complete."""
        self._flush()
        self._queue.put(None)
        self._writer.join()
        os.fsync(self._fd)
        os.close(self._fd)
        publish(self.partial_path, self.path, durable=False)  # fsynced above, through the open fd


def partial_path(path: Path) -> Path:
    """Where a spool is written until it is complete (left behind by a worker that died)."""
    return path.with_name(f".{path.name}.partial")


def read_spool(path: str | Path) -> Iterator[list[tuple]]:
    """The frames of a complete spool file, one list of `fields` tuples each."""
    with open(path, "rb") as handle:
        while header := handle.read(_FRAME.size):
            (size,) = _FRAME.unpack(header)
            yield marshal.loads(handle.read(size))
