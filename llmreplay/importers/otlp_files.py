"""OTLP JSON export files as texts to decode, each named by file and line (or record): one file or every
file of a directory; plain JSON lines, gzip, or the collector file exporter's `compression: zstd`
(a zstd stream of lines, or the older 4-byte length-prefixed frames). No JSON decoding here.
"""

from __future__ import annotations

import gzip
import io
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from llmreplay.errors import BadInput

GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
MAX_RECORD_BYTES = 256 << 20  # one export batch; a larger length prefix is a corrupt file, not a batch


@dataclass(frozen=True, slots=True)
class ExportText:
    where: str  # "FILE:LINE" (or "FILE:record N" for length-prefixed frames): names the batch in errors
    text: str


def export_files(path: Path) -> list[Path]:
    """The file itself, or a directory's regular files in name order (hidden files left out)."""
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.is_file() and not p.name.startswith("."))
        if not files:
            raise BadInput(f"{path}: directory holds no files")
        return files
    if not path.is_file():
        raise BadInput(f"{path}: no such file or directory")
    if path.stat().st_size == 0:
        raise BadInput(f"{path}: empty file")
    return [path]


def export_texts(path: Path) -> Iterator[ExportText]:
    """Every non-blank line (or frame) of a file, decompressed and decoded as UTF-8."""
    try:
        with open(path, "rb") as raw:
            head = raw.read(8)
            raw.seek(0)
            if head.startswith(GZIP_MAGIC):
                yield from _lines(path, gzip.GzipFile(fileobj=raw), (EOFError, zlib.error, gzip.BadGzipFile))
            elif head.startswith(ZSTD_MAGIC):
                from backports import zstd  # mitmproxy's dependency: the standard library's zstd before 3.14

                yield from _lines(path, zstd.ZstdFile(raw), (EOFError, zstd.ZstdError))
            elif head[4:8] == ZSTD_MAGIC:
                yield from _frames(path, raw)
            else:
                yield from _lines(path, raw, ())
    except OSError as exc:
        raise BadInput(f"{path}: cannot read ({exc.strerror or exc})") from None


def _lines(path: Path, stream, corrupt: tuple[type[Exception], ...]) -> Iterator[ExportText]:
    """`corrupt`: what the decompressor raises for a truncated or damaged file."""
    line_no = 0
    try:
        for line_no, line in enumerate(stream, start=1):
            if line.strip():
                yield ExportText(f"{path}:{line_no}", _decoded(line, f"{path}:{line_no}"))
    except corrupt as exc:
        raise BadInput(f"{path}:{line_no + 1}: compressed data is truncated or corrupt ({exc})") from None


def _frames(path: Path, raw: io.BufferedReader) -> Iterator[ExportText]:
    """The file exporter's legacy compressed form: each batch a zstd frame behind its big-endian length."""
    from backports import zstd

    record = 0
    while prefix := raw.read(4):
        record += 1
        where = f"{path}:record {record}"
        size = struct.unpack(">I", prefix)[0] if len(prefix) == 4 else -1
        if not 0 < size <= MAX_RECORD_BYTES:
            raise BadInput(f"{where}: not a length-prefixed zstd frame (size field {prefix.hex()})")
        frame = raw.read(size)
        if len(frame) != size:
            raise BadInput(f"{where}: truncated ({len(frame)} of {size} bytes)")
        try:
            text = zstd.decompress(frame)
        except zstd.ZstdError as exc:
            raise BadInput(f"{where}: not a zstd frame ({exc})") from None
        yield ExportText(where, _decoded(text, where))


def _decoded(data: bytes, where: str) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise BadInput(f"{where}: not UTF-8 text") from None
