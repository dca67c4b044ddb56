"""Dead letters: captures (or rows) the converter could not turn into a trace row, kept with the reason.

A rejected capture never blocks the rows after it and is never retried by the next converter: it
is moved here instead. Each entry is two files in `.spool/rejected/`, both 0600: `<id>.frame` (the
journal frame as received; API keys were already hashed on the proxy) and a line in `reasons.jsonl`.
In a shape recording (`--shape`) a kept frame holds its meta only (stamps, status, sizes): the request
and response bytes, the text, are dropped. Dead letters count against `--spool-limit` with the journal:
past it a dead letter keeps its reason line only, and the proxy (which counts these bytes in its
journal budget) drops new captures until there is room again.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import orjson

from recorder.frames import HEAD

log = logging.getLogger("llmreplay.recorder")

REJECTED_DIR = "rejected"
REASONS = "reasons.jsonl"


class DeadLetters:
    def __init__(self, spool_dir: Path, content: bool = True, limit_bytes: int | None = None):
        self.dir = spool_dir / REJECTED_DIR
        self.content = content  # False: a shape recording, whose dead letters hold no text
        self.limit_bytes = limit_bytes
        self.bytes = dead_letter_bytes(spool_dir)
        self.count = 0
        self.not_kept = 0  # entries past the budget: reason line only

    def reject_frame(self, request_id: str, kind: bytes, meta: bytes, blob: bytes, reason: str) -> None:
        """Keep a journal frame that could not be converted; logged, counted, never raised."""
        if not self.content:
            blob = b""  # request body and response reads: the text a shape recording never keeps
            reason = _clip(reason)
        data = HEAD.pack(kind, len(meta), len(blob)) + meta + blob
        self._keep(request_id, ".frame", data, reason)

    def reject_row(self, row: dict, reason: str) -> None:
        """Keep a built row that could not be written (a bug in the row check, if it ever happens)."""
        if not self.content:
            row = {k: v for k, v in row.items() if not k.startswith("content_")}
            reason = _clip(reason)
        data = orjson.dumps(row, default=repr, option=orjson.OPT_PASSTHROUGH_DATETIME)
        self._keep(str(row.get("request_id")), ".row.json", data, reason)

    def _keep(self, request_id: str, suffix: str, data: bytes, reason: str) -> None:
        self.count += 1
        log.error(
            "request %s: not convertible, kept in %s/%s (%s)", request_id, REJECTED_DIR, REASONS, reason
        )
        try:
            self.dir.mkdir(mode=0o700, exist_ok=True)
            name = "".join(c if c.isalnum() or c in "-_." else "_" for c in request_id)[:120] or "unnamed"
            file: str | None = f"{name}{suffix}"
            if self.limit_bytes is not None and self.bytes + len(data) > self.limit_bytes:
                self.not_kept += 1
                file, reason = None, f"{reason} [not kept: dead letters and journal over --spool-limit]"
            else:
                _write_private(self.dir / file, data)
                self.bytes += len(data)
            line = orjson.dumps({"request_id": request_id, "file": file, "reason": reason, "at": time.time()})
            _write_private(self.dir / REASONS, line + b"\n", append=True)
            self.bytes += len(line) + 1
        except OSError as exc:  # a full disk must not turn one bad request into a dead converter
            log.error("request %s: dead letter not written (%s)", request_id, exc.strerror or exc)


def rejected_ids(spool_dir: Path) -> set[str]:
    """Request ids already dead-lettered: a recovering converter skips them instead of failing again."""
    path = spool_dir / REJECTED_DIR / REASONS
    found: set[str] = set()
    try:
        lines = path.read_bytes().splitlines()
    except FileNotFoundError:
        return found
    for line in lines:
        try:
            found.add(orjson.loads(line)["request_id"])
        except (orjson.JSONDecodeError, KeyError, TypeError):
            continue  # a torn last line (the converter died writing it)
    return found


def dead_letter_bytes(spool_dir: Path) -> int:
    """Bytes of the dead letters on disk (the files of `.spool/rejected/`)."""
    total = 0
    try:
        with os.scandir(spool_dir / REJECTED_DIR) as entries:
            for entry in entries:
                try:
                    total += entry.stat(follow_symlinks=False).st_size
                except OSError:
                    continue
    except OSError:
        return 0
    return total


class DeadLetterSize:
    """`dead_letter_bytes`, rescanned only when the directory or its reasons file changed (cheap to poll)."""

    def __init__(self, spool_dir: Path):
        self.spool_dir = spool_dir
        self._seen: tuple[int, int] | None = None
        self.bytes = 0

    def poll(self) -> int:
        directory = self.spool_dir / REJECTED_DIR
        try:
            mark = (directory.stat().st_mtime_ns, (directory / REASONS).stat().st_size)
        except OSError:
            mark = (0, 0) if not directory.exists() else (-1, -1)
        if mark != self._seen or mark == (-1, -1):
            self._seen, self.bytes = mark, dead_letter_bytes(self.spool_dir)
        return self.bytes


def _clip(reason: str, limit: int = 300) -> str:
    """A reason as the shape recording keeps it: short (an exception may quote what it choked on)."""
    return reason if len(reason) <= limit else reason[: limit - 3] + "..."


def _write_private(path: Path, data: bytes, append: bool = False) -> None:
    mode = os.O_APPEND if append else os.O_TRUNC
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | mode, 0o600)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
