"""Dead letters: captures (or rows) the converter could not turn into a trace row, kept with the reason.

A rejected capture never blocks the rows after it and is never retried by the next converter: it
is moved here instead. Each entry is two files in `.spool/rejected/`, both 0600: `<id>.frame` (the
journal frame as received; API keys were already hashed on the proxy) and a line in `reasons.jsonl`.
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
    def __init__(self, spool_dir: Path):
        self.dir = spool_dir / REJECTED_DIR
        self.count = 0

    def reject_frame(self, request_id: str, kind: bytes, meta: bytes, blob: bytes, reason: str) -> None:
        """Keep a journal frame that could not be converted; logged, counted, never raised."""
        data = HEAD.pack(kind, len(meta), len(blob)) + meta + blob
        self._keep(request_id, ".frame", data, reason)

    def reject_row(self, row: dict, reason: str) -> None:
        """Keep a built row that could not be written (a bug in the row check, if it ever happens)."""
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
            _write_private(self.dir / f"{name}{suffix}", data)
            line = {"request_id": request_id, "file": f"{name}{suffix}", "reason": reason, "at": time.time()}
            _write_private(self.dir / REASONS, orjson.dumps(line) + b"\n", append=True)
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


def _write_private(path: Path, data: bytes, append: bool = False) -> None:
    mode = os.O_APPEND if append else os.O_TRUNC
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | mode, 0o600)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
