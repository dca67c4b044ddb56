"""Reading public trace files line by line, turning every malformed value into a BadInput.

Errors name the file, the 1-based line (the header of a CSV is line 1) and the field.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterator
from pathlib import Path

from llmreplay.errors import BadInput


def open_source(path: Path):
    """Open a source file as text (BOM-tolerant); missing, unreadable or empty files are BadInput."""
    if not path.is_file():
        raise BadInput(f"{path}: no such file")
    if path.stat().st_size == 0:
        raise BadInput(f"{path}: empty file")
    try:
        return open(path, encoding="utf-8-sig", newline="")
    except OSError as exc:
        raise BadInput(f"{path}: cannot read ({exc.strerror})") from None


def iter_jsonl(path: Path) -> Iterator[tuple[int, dict]]:
    """(line number, object) per non-blank line; a line that is not a JSON object is BadInput."""
    with open_source(path) as handle:
        seen_any = False
        for line_no, line in enumerate(_decoded(handle, path), start=1):
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except json.JSONDecodeError as exc:
                raise BadInput(f"{path}:{line_no}: not valid JSON ({exc.msg})") from None
            if not isinstance(value, dict):
                raise BadInput(f"{path}:{line_no}: expected a JSON object, got {type(value).__name__}")
            seen_any = True
            yield line_no, value
        if not seen_any:
            raise BadInput(f"{path}: no JSON lines (only blank lines)")


def iter_csv(path: Path, required: tuple[str, ...]) -> Iterator[tuple[int, dict[str, str]]]:
    """(line number, row by column name); the header must hold every `required` column."""
    with open_source(path) as handle:
        reader = csv.reader(_decoded(handle, path))
        try:
            header = [name.strip() for name in next(reader)]
        except StopIteration:
            raise BadInput(f"{path}: empty file") from None
        except csv.Error as exc:
            raise BadInput(f"{path}:1: unreadable CSV header ({exc})") from None
        missing = [name for name in required if name not in header]
        if missing:
            raise BadInput(f"{path}:1: column '{missing[0]}' is missing (header has: {', '.join(header)})")
        seen_any = False
        try:
            for fields in reader:
                line_no = reader.line_num
                if not fields or all(not f.strip() for f in fields):
                    continue
                if len(fields) != len(header):
                    raise BadInput(f"{path}:{line_no}: {len(fields)} fields, the header has {len(header)}")
                seen_any = True
                yield line_no, dict(zip(header, (f.strip() for f in fields), strict=True))
        except csv.Error as exc:
            raise BadInput(f"{path}:{reader.line_num}: malformed CSV ({exc})") from None
        if not seen_any:
            raise BadInput(f"{path}: header only, no rows")


def _decoded(handle, path: Path) -> Iterator[str]:
    try:
        yield from handle
    except UnicodeDecodeError:
        raise BadInput(f"{path}: not UTF-8 text") from None


def count_field(value, where: str, name: str) -> int:
    """A non-negative integer token count; JSON numbers or CSV text ("12", "12.0") accepted."""
    number = number_field(value, where, name)
    if number != int(number):
        raise BadInput(f"{where}: field '{name}' is not a whole number: {value!r}")
    if number < 0:
        raise BadInput(f"{where}: field '{name}' is negative: {value!r}")
    return int(number)


def number_field(value, where: str, name: str) -> float:
    """A finite number from a JSON number or numeric text (booleans are refused)."""
    if isinstance(value, bool) or value is None:
        raise BadInput(f"{where}: field '{name}' is not a number: {value!r}")
    if isinstance(value, int | float):
        number = float(value) if isinstance(value, float) else value
    elif isinstance(value, str):
        try:
            number = int(value) if value.strip().lstrip("-").isdigit() else float(value)
        except ValueError:
            raise BadInput(f"{where}: field '{name}' is not a number: {value!r}") from None
    else:
        raise BadInput(f"{where}: field '{name}' is not a number: {value!r}")
    if isinstance(number, float) and not math.isfinite(number):
        raise BadInput(f"{where}: field '{name}' is not a finite number: {value!r}")
    return number


def is_blank(value) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())
