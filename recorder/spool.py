"""Append-only on-disk spool of finished rows (JSON lines), so a crash loses at most one flush interval.

One spool segment per Parquet file being built; it is deleted once that file has been renamed
into place. Reading a segment back skips a torn last line (the crash case).
"""

from __future__ import annotations

import fcntl
import os
import stat
from collections.abc import Iterable
from pathlib import Path

import orjson

from llmreplay.errors import BadInput

SPOOL_DIR = ".spool"
SUFFIX = ".jsonl"


class SpoolSegment:
    """Rows appended with one write() per batch; the OS has them after `append`, the disk after `sync`."""

    def __init__(self, path: Path):
        self.path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self.rows = 0
        self.bytes = 0

    def append(self, rows: Iterable[dict]) -> None:
        lines = [orjson.dumps(row) for row in rows]
        if not lines:
            return
        data = b"\n".join(lines) + b"\n"
        view = memoryview(data)
        while view:
            written = os.write(self._fd, view)
            view = view[written:]
        self.rows += len(lines)
        self.bytes += len(data)

    def sync(self) -> None:
        os.fsync(self._fd)

    def close_and_delete(self) -> None:
        os.close(self._fd)
        self.path.unlink(missing_ok=True)

    def close(self) -> None:
        os.close(self._fd)


def read_segment(path: Path) -> list[dict]:
    """Every complete row of a segment; a torn or garbled line (crash mid-write) is skipped."""
    rows = []
    with open(path, "rb") as handle:
        for line in handle:
            if not line.endswith(b"\n"):
                break
            try:
                row = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            if isinstance(row, dict):
                rows.append(row)
    return rows


def leftover_segments(spool_dir: Path) -> list[Path]:
    return sorted(spool_dir.glob(f"*{SUFFIX}"))


def check_spool_dir(out_dir: Path, flag: str = "-o") -> None:
    """BadInput unless `out_dir/.spool` is absent or a real directory: the journal (raw prompts) and the
    dead letters are written only where the recorder made them, never through a link (as llmreplay.output_paths)."""
    spool = Path(out_dir).expanduser() / SPOOL_DIR
    try:
        mode = os.lstat(spool).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return
    except OSError as exc:
        raise BadInput(f"{flag} {out_dir}: cannot use {spool} ({exc.strerror})") from None
    if stat.S_ISLNK(mode):
        raise BadInput(f"{flag} {out_dir}: {spool} is a symbolic link; the recorder writes its spool only to a "
                       "real directory (remove the link)")  # fmt: skip
    if not stat.S_ISDIR(mode):
        raise BadInput(f"{flag} {out_dir}: {spool} is not a directory; remove it or give another -o")


def private_dirs(out_dir: Path, content: bool) -> None:
    """The spool (raw request bodies) is always 0700; the output directory too for content traces."""
    check_spool_dir(out_dir)
    for path, private in ((out_dir, content), (out_dir / SPOOL_DIR, True)):
        if not private:
            path.mkdir(parents=True, exist_ok=True)
            continue
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        if path.stat().st_mode & 0o077:
            path.chmod(0o700)


class SpoolLock:
    """One recorder per output directory: two would recover (and delete) each other's spools."""

    def __init__(self, spool_dir: Path):
        spool_dir.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(spool_dir / "lock", os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._fd)
            raise BadInput(
                f"{spool_dir.parent}: another recorder is writing to this directory (give each process its own -o)"
            ) from None

    def release(self) -> None:
        os.close(self._fd)
