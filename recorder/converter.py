"""The converter process: journal frames -> trace rows -> row spool -> Parquet. All the heavy work lives here.

Started by the proxy (multiprocessing, spawn). It first recovers what a dead converter or a dead
run left behind, then tails the live journal until the proxy's end-of-run marker. It never talks
to the network. It ignores SIGINT (Ctrl-C reaches the whole process group; the proxy drains, then
this files everything), stops at once on SIGTERM (nothing is lost: the journal keeps every capture
and the proxy starts another converter to finish), and dies with its proxy (PR_SET_PDEATHSIG, and a
watch thread where that is missing), even in the middle of a long decode.
"""

from __future__ import annotations

import fcntl
import logging
import os
import resource
import signal
import sys
import threading
import time
from pathlib import Path

from llmreplay.errors import BadInput
from llmreplay.trace_format import TraceMeta
from llmreplay.trace_values import bounded_row
from recorder.capture import Capture
from recorder.converter_spec import ConverterSpec
from recorder.dead_letter import DeadLetters, rejected_ids
from recorder.frames import AMEND, CAPTURE, WATERMARK, amended_id, apply_amend, decode_capture, watermark_of
from recorder.journal import journal_segments, segment_number
from recorder.journal_tail import JournalTail, read_dead_segment
from recorder.record_builder import LINK_NEW, REQUEST_OVER_LIMIT, BuildSettings, RecordBuilder
from recorder.sessions import SessionLink, SessionTracker
from recorder.spool import SPOOL_DIR
from recorder.writer import RowFiler, WriterSettings, filed_ids, recover_spool, write_rows

log = logging.getLogger("llmreplay.recorder")

IDLE_WAIT_S = 0.2  # between journal reads: big batches, few wake-ups (it competes with the proxy for CPU)
BACKLOG_FRAMES = 512  # a read this big means the journal is ahead: read again at once
LOCK_WAIT_S = 60.0
PARENT_WATCH_S = 0.2
# Peak RSS the converter is sized for: the tokenizer (~170 MB for Tekken), one request body of
# max_request_bytes being parsed and tokenized (~250 MB for 16 MiB), a read of the journal and the rows
# of a Parquet file in the making. Bodies past the bounds are not parsed (recorder/decoding.py), so the
# budget holds whatever clients send; a converter over it says so at CRITICAL.
MEMORY_BUDGET_BYTES = 1024 * 1024 * 1024


def run_converter(spec: ConverterSpec, pipe) -> None:
    """multiprocessing target. Sends ("ready", tokenizer id) or ("error", message) on `pipe`, and
    ("done", counts) after a clean end of run."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole process group: the proxy drains
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # stop now, mid-decode too: the journal keeps everything
    die_with_parent(spec.parent_pid)
    os.nice(10)  # the proxy carries live traffic; this work can wait for a free core
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s converter %(message)s")
    try:
        converter = Converter(spec)
    except BadInput as exc:
        pipe.send(("error", str(exc)))
        raise SystemExit(2) from None
    pipe.send(("ready", converter.meta.tokenizer))
    stats = converter.run()
    pipe.send(("done", stats))
    pipe.close()


class Converter:
    def __init__(self, spec: ConverterSpec):
        from llmreplay.tokenizers import load_tokenizer

        self.spec = spec
        self.out_dir = Path(spec.out_dir).expanduser()
        self.spool_dir = self.out_dir / SPOOL_DIR
        self._lock_fd = _take_lock(self.spool_dir / "converter.lock")
        tokenizer = load_tokenizer(spec.tokenizer)
        self.meta = TraceMeta(
            source="recorder",
            block_size=spec.block_size,
            tokenizer=tokenizer.id,
            content=spec.content,
            clock_domain="gateway",
        )
        self.settings = BuildSettings(
            tokenizer, spec.key, spec.block_size, spec.content, spec.session_from_user, spec.max_request_bytes
        )
        self.builder = self._new_builder()
        self.filer = RowFiler(
            WriterSettings(
                self.out_dir,
                self.meta,
                spec.flush_interval_s,
                spec.rotate_s,
                spec.rotate_bytes,
                f"{spec.run_token}-{os.getpid()}",
            )
        )
        self.problems = 0
        self.dead_letters = DeadLetters(self.spool_dir, spec.content, spec.spool_limit_bytes)
        self.filer.reject = self.dead_letters.reject_row

    def _new_builder(self) -> RecordBuilder:
        return RecordBuilder(self.settings, SessionTracker(self.spec.max_sessions))

    # -- recovery --------------------------------------------------------------------------
    def recover(self) -> set[str]:
        """Finish what dead predecessors left; returns the live run's ids that are already filed."""
        recovered = recover_spool(self.out_dir, self.meta, self.dead_letters.reject_row)
        if recovered:
            log.warning("recovered %d rows left in the row spool by a stopped converter", recovered)
        live_ids: set[str] = set()
        dead_runs: dict[str, list[Path]] = {}
        for token, _, path in journal_segments(self.spool_dir):
            if token == self.spec.run_token:
                live_ids.update(_capture_ids(read_dead_segment(path, still_written=True)))
            else:
                dead_runs.setdefault(token, []).append(path)
        for token, paths in dead_runs.items():
            self._recover_dead_run(token, paths)
        return filed_ids(self.out_dir, {self.spec.run_token}, live_ids) | rejected_ids(self.spool_dir)

    def _recover_dead_run(self, token: str, paths: list[Path]) -> None:
        """A run whose proxy died: its journal holds every capture it finished; file those not filed yet."""
        frames = [frame for path in paths for frame in read_dead_segment(path)]
        filed = filed_ids(self.out_dir, {token}, set(_capture_ids(frames))) | rejected_ids(self.spool_dir)
        builder, rows, pending = self._new_builder(), [], PendingRows()
        for frame in frames:
            row = self._frame_row(frame, builder, filed, pending, 0)
            if row is not None:
                rows.append(row)
        rows += pending.take_all()  # the proxy died before their outcome was final: as journaled
        if rows:
            stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
            path = self.out_dir / f"trace-{stamp}-{token}-journal{os.getpid()}.parquet"
            write_rows(path, rows, self.meta, self.dead_letters.reject_row)
            log.warning("recovered %d requests from the journal of an earlier run (%s)", len(rows), token)
        for path in paths:
            path.unlink()

    # -- live ------------------------------------------------------------------------------
    def run(self) -> dict:
        """Recover, then tail the live journal until its end-of-run marker; returns the run's counts."""
        skip = self.recover()
        tail = JournalTail(self.spool_dir, self.spec.run_token)
        filer, spec = self.filer, self.spec
        last_sync = last_stats = time.monotonic()
        built = 0
        pending = PendingRows()
        while True:
            segment = tail.number  # frames of this read start in this segment (or a later one)
            frames = tail.read()
            rows = []
            for frame in frames:
                if frame[0] == WATERMARK:
                    filer.watermark(watermark_of(frame[1]))
                    continue
                row = self._frame_row(frame, self.builder, skip, pending, segment)
                if row is not None:
                    rows.append(row)
            if tail.run_ended:
                rows += pending.take_all()
            filer.add(rows)
            built += len(rows)
            if tail.run_ended:
                filer.finish()
                _delete(tail.finished)
                break
            now = time.monotonic()
            if now - last_sync >= spec.flush_interval_s:
                filer.sync()
                _delete(tail.finished, below=pending.oldest_segment())  # their rows are in the row spool now
                last_sync = now
            filer.file_ready()
            if now - last_stats >= spec.stats_interval_s:
                last_stats = now
                peak = peak_rss_bytes()
                (log.critical if peak > MEMORY_BUDGET_BYTES else log.info)(
                    "rows=%d in_files=%d problems=%d rejected=%d peak_rss_mb=%d (budget %d)",
                    built,
                    filer.rows_in_files,
                    self.problems,
                    self.dead_letters.count,
                    peak >> 20,
                    MEMORY_BUDGET_BYTES >> 20,
                )
            if os.getppid() != spec.parent_pid:
                log.error("the proxy is gone; the journal and row spool are recovered at the next start")
                os._exit(3)
            if len(frames) < BACKLOG_FRAMES:
                time.sleep(IDLE_WAIT_S)
        tail.close()
        stats = {
            "rows": built,
            "in_files": filer.rows_in_files,
            "files": filer.files_written,
            "problems": self.problems,
            "rejected": self.dead_letters.count,
        }
        log.info("stopped: %s", " ".join(f"{k}={v}" for k, v in stats.items()))
        return stats

    def _frame_row(self, frame, builder: RecordBuilder, skip: set[str], pending: PendingRows, segment: int):
        """The row a CAPTURE or AMEND frame completes, if any (a pending capture waits for its AMEND)."""
        if frame[0] == CAPTURE:
            return self._convert(frame, builder, skip, pending, segment)
        if frame[0] == AMEND:
            return self._settle(frame[1], builder, pending)
        return None

    def _convert(
        self, frame, builder: RecordBuilder, skip: set[str], pending: PendingRows | None = None, segment: int = 0
    ) -> dict | None:
        """One capture frame -> a checked row; None when it is skipped, held or dead-lettered (never raises)."""
        kind, meta, blob = frame
        try:
            cap = decode_capture(meta, blob)
            if cap.request_id in skip:
                return None
            row = self._build_row(cap, builder)
            if cap.pending and pending is not None:
                pending.hold(cap, row, segment)  # built now, so its session links in arrival order
                return None
            return row
        except Exception as exc:  # noqa: BLE001 - one bad request must not stop the rows after it
            request_id = next(iter(_capture_ids([frame])), "unknown")
            if request_id in skip:
                return None
            log.debug("request %s: conversion failed", request_id, exc_info=True)
            self.dead_letters.reject_frame(request_id, kind, meta, blob, f"{type(exc).__name__}: {exc}")
            skip.add(request_id)
            return None

    def _settle(self, meta: bytes, builder: RecordBuilder, pending: PendingRows) -> dict | None:
        """A pending capture's final outcome: its provisional row, or one rebuilt from what was delivered."""
        held = pending.take(meta)
        if held is None:
            return None  # skipped, dead-lettered, or filed before a restart
        cap, row = held
        try:
            before = (cap.outcome, cap.captured_bytes)
            apply_amend(cap, meta)
            if (cap.outcome, cap.captured_bytes) == before:  # the usual case: only the end moved
                if row["e2e_ns"] is not None and cap.last_byte_ns:
                    row["e2e_ns"] = cap.last_byte_ns - cap.arrival_ns
                return row
            link = SessionLink(row["session_id"], row["turn_index"], row["parent_request_id"], row["think_time_ns"])
            return self._build_row(cap, builder, link if row["session_id"] else None)
        except Exception as exc:  # noqa: BLE001 - as in _convert: keep it, move on
            self.dead_letters.reject_row(row, f"amend not applicable: {type(exc).__name__}: {exc}")
            return None

    def _build_row(self, cap: Capture, builder: RecordBuilder, link=LINK_NEW) -> dict:
        record, problems = builder.build(cap, link)
        row = bounded_row(record.to_row())
        out_of_range = [name for name in row.get("invalid_fields") or () if name != REQUEST_OVER_LIMIT]
        if out_of_range:  # the request body's own problem is already said
            problems.append("out of range, recorded as null (a required count: clamped): " + ", ".join(out_of_range))
        if problems:
            self.problems += 1
            log.info("request %s: recorded with problems: %s", cap.request_id, "; ".join(problems))
        if not self.meta.content:
            row = {k: v for k, v in row.items() if not k.startswith("content_")}
        return row


def die_with_parent(parent_pid: int) -> None:
    """Never outlive the proxy: the kernel kills this process when its parent dies (Linux), and a thread
    checks the parent every PARENT_WATCH_S elsewhere (it needs the GIL, the kernel does not)."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            pr_set_pdeathsig = 1
            ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent_pid:  # it died before the line above
        os._exit(3)

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(PARENT_WATCH_S)
        os._exit(3)

    threading.Thread(target=watch, name="llmreplay-parent-watch", daemon=True).start()


def peak_rss_bytes() -> int:
    """This process's peak resident set so far (Linux reports ru_maxrss in KiB, macOS in bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def _capture_ids(frames) -> list[str]:
    """Request ids of the capture frames; a frame whose meta is unreadable is left to `_convert`."""
    import orjson

    ids = []
    for kind, meta, _ in frames:
        if kind == CAPTURE:
            try:
                request_id = orjson.loads(meta)["request_id"]
            except (orjson.JSONDecodeError, KeyError, TypeError):
                continue
            if isinstance(request_id, str):
                ids.append(request_id)
    return ids


def _delete(paths: list[Path], below: int | None = None) -> None:
    """Delete finished segments, except those at or after `below` (they hold a pending capture)."""
    kept = []
    for path in paths:
        if below is not None and segment_number(path) >= below:
            kept.append(path)
        else:
            path.unlink(missing_ok=True)
    paths[:] = kept


class PendingRows:
    """Rows journaled before their outcome was final (HTTP/2 streams), waiting for their AMEND frame."""

    def __init__(self) -> None:
        self._held: dict[str, tuple[Capture, dict, int]] = {}

    def hold(self, cap: Capture, row: dict, segment: int) -> None:
        self._held[cap.request_id] = (cap, row, segment)

    def take(self, amend_meta: bytes) -> tuple[Capture, dict] | None:
        held = self._held.pop(amended_id(amend_meta), None)
        return None if held is None else held[:2]

    def take_all(self) -> list[dict]:
        rows = [row for _, row, _ in self._held.values()]
        self._held.clear()
        return rows

    def oldest_segment(self) -> int | None:
        return min((segment for *_, segment in self._held.values()), default=None)


def _take_lock(path: Path) -> int:
    """One converter per directory: a converter orphaned by a killed proxy exits within ~0.2 s; wait for it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    deadline = time.monotonic() + LOCK_WAIT_S
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() > deadline:
                os.close(fd)
                raise BadInput(f"{path}: another converter still holds this directory") from None
            time.sleep(0.1)
