"""Output paths, the one home of their checks and of the atomic write (temporary name, fsync, rename).

A directory, device, FIFO or symbolic link is never replaced; failures are one BadInput line naming the flag.
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from llmreplay.errors import BadInput


def check_output_file(path: str | os.PathLike, force: bool = False, flag: str = "-o") -> Path:
    """The file `path` may be written: a new name, or (with `force`) an existing regular file."""
    target = Path(path).expanduser()
    info = _lstat(target, flag)
    if info is not None:
        _refuse_special(target, info, flag, want_dir=False)
        if not force:
            raise BadInput(f"{flag} {target}: already exists (pass --force to replace it)")
    _check_writable_parent(target, flag)
    return target


def check_output_dir(path: str | os.PathLike, flag: str = "-o") -> Path:
    """The directory `path` exists and can be written in, or can be created."""
    target = Path(path).expanduser()
    info = _lstat(target, flag)
    if info is None:
        _check_writable_parent(target, flag)
        return target
    if stat.S_ISLNK(info.st_mode) and target.is_dir():
        info = target.stat()  # a symbolic link to a directory is a directory to write in
    _refuse_special(target, info, flag, want_dir=True)
    _probe_write(target, flag, target)
    return target


def make_output_dir(path: str | os.PathLike, flag: str = "-o", mode: int = 0o777) -> Path:
    """check_output_dir, then create it (and missing parents)."""
    target = check_output_dir(path, flag)
    try:
        target.mkdir(parents=True, exist_ok=True, mode=mode)
    except OSError as exc:
        raise cannot_write(flag, target, exc) from None
    return target


def temp_path(target: Path) -> Path:
    """A temporary name next to `target` (same directory: the rename stays on one file system)."""
    return target.with_name(f".{target.name}.tmp-{os.getpid()}")


def commit(tmp: Path, target: Path, flag: str = "-o") -> None:
    """fsync `tmp` and rename it onto `target` (replace_file); OSError becomes one BadInput line."""
    try:
        publish(tmp, target, flag=flag)
    except OSError as exc:
        raise cannot_write(flag, target, exc) from None


def publish(
    tmp: str | os.PathLike, target: str | os.PathLike, durable: bool = True, flag: str = "-o"
) -> None:
    """The one rename of a finished file onto its name: complete there, or absent.

    `durable` fsyncs the file first (and the directory after); a hand-off between the processes of
    one run may skip that. OSError propagates: internal writers have no flag to name.
    """
    tmp, target = Path(tmp), Path(target)
    if durable:
        with open(tmp, "rb") as handle:
            os.fsync(handle.fileno())
    replace_file(tmp, target, flag, durable)


def replace_file(tmp: Path, target: Path, flag: str = "-o", durable: bool = True) -> None:
    """Rename `tmp` onto `target`, refusing a target that is (now) a directory, device or link."""
    info = _lstat(target, flag)
    if info is not None:
        _refuse_special(target, info, flag, want_dir=False)
    os.replace(tmp, target)
    if durable:
        _fsync_dir(target.parent)


@contextmanager
def atomic_output(path: str | os.PathLike, force: bool = False, flag: str = "-o") -> Iterator[Path]:
    """Yield a temporary path to write; on success it becomes `path`, on any failure it goes."""
    target = check_output_file(path, force, flag)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise cannot_write(flag, target, exc) from None
    tmp = temp_path(target)
    try:
        try:
            yield tmp
        except OSError as exc:
            if exc.errno is None:
                raise
            raise cannot_write(flag, target, exc) from None
        commit(tmp, target, flag)
    finally:
        tmp.unlink(missing_ok=True)


def write_atomic(path: str | os.PathLike, data: bytes | str, force: bool = False, flag: str = "-o") -> Path:
    """Write `data` (str as UTF-8) to `path` atomically."""
    payload = data.encode("utf-8") if isinstance(data, str) else data
    with atomic_output(path, force, flag) as tmp:
        tmp.write_bytes(payload)
    return Path(path).expanduser()


def cannot_write(flag: str, path: Path, exc: OSError) -> BadInput:
    return BadInput(f"{flag} {path}: cannot write ({exc.strerror or exc})")


def _lstat(target: Path, flag: str) -> os.stat_result | None:
    try:
        return os.lstat(target)
    except FileNotFoundError:
        return None
    except NotADirectoryError:
        return None  # a parent is a file: _check_writable_parent names it
    except OSError as exc:
        raise BadInput(f"{flag} {target}: cannot use ({exc.strerror})") from None


def _refuse_special(target: Path, info: os.stat_result, flag: str, want_dir: bool) -> None:
    mode = info.st_mode
    if stat.S_ISLNK(mode):
        raise BadInput(
            f"{flag} {target}: is a symbolic link; give the real path (nothing is written through links)"
        )
    if stat.S_ISDIR(mode) and not want_dir:
        raise BadInput(f"{flag} {target}: is a directory; give a file name")
    if stat.S_ISREG(mode) and want_dir:
        raise BadInput(f"{flag} {target}: is a file; give a directory")
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        raise BadInput(
            f"{flag} {target}: is a device or special file, not a regular file; refusing to replace it"
        )


def _check_writable_parent(target: Path, flag: str) -> None:
    """The nearest existing ancestor of `target` is a directory this process can create files in."""
    ancestor = target.parent
    while True:
        try:
            info = ancestor.stat()
            break
        except FileNotFoundError:
            if ancestor == ancestor.parent:
                raise BadInput(f"{flag} {target}: no existing directory above it") from None
            ancestor = ancestor.parent
        except NotADirectoryError:
            ancestor = ancestor.parent
        except OSError as exc:
            raise BadInput(f"{flag} {target}: cannot use {ancestor} ({exc.strerror})") from None
    if not stat.S_ISDIR(info.st_mode):
        raise BadInput(f"{flag} {target}: {ancestor} is a file, not a directory")
    _probe_write(ancestor, flag, target)


def _probe_write(directory: Path, flag: str, target: Path) -> None:
    """Create and remove a file in `directory`: the one check that holds for root and read-only mounts."""
    try:
        fd, name = tempfile.mkstemp(dir=directory, prefix=".llmreplay-probe-")
    except OSError as exc:
        where = "" if directory == target else f" in {directory}"
        raise BadInput(f"{flag} {target}: cannot write{where} ({exc.strerror})") from None
    os.close(fd)
    os.unlink(name)


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems cannot fsync a directory; the rename is done either way
    finally:
        os.close(fd)
