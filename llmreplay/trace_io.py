"""Reading and writing trace files: validation at the edge, atomic writes, streaming batches.

A trace is one Parquet file or a directory of them (for example one file per hour).
Files appear only when complete: writers use a temporary name and rename at the end.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from llmreplay.errors import BadInput, first_line
from llmreplay.output_paths import replace_file, temp_path
from llmreplay.trace_arrow import records_to_table, trace_schema
from llmreplay.trace_format import (
    ADDED_COLUMNS,
    CONTENT_COLUMN_NAMES,
    ENUM_COLUMNS,
    METADATA_KEY,
    NON_NEGATIVE_COLUMNS,
    UPPER_BOUNDS,
    VALUES_SINCE,
    TraceMeta,
    TraceRecord,
    knows_every_value,
    refusal,
    value_refusal,
    version_tuple,
)
from llmreplay.trace_meta_json import parse_meta


@dataclass(frozen=True)
class Trace:
    """A whole trace in memory, sorted by arrival."""

    table: pa.Table
    meta: TraceMeta
    files: tuple[Path, ...]

    @property
    def has_content(self) -> bool:
        return all(name in self.table.column_names for name in CONTENT_COLUMN_NAMES)

    def records(self) -> Iterator[TraceRecord]:
        for batch in self.table.to_batches():
            for row in batch.to_pylist():
                yield TraceRecord.from_row(row)


def trace_files(path: str | os.PathLike) -> list[Path]:
    """The Parquet files that make up the trace at `path`, in name order."""
    root = Path(path)
    if not root.exists():
        raise BadInput(f"{root}: no such file or directory")
    if root.is_file():
        return [root]
    if not root.is_dir():  # a FIFO, a device, a socket: reading it could block or never end
        raise BadInput(
            f"{root}: not a regular file (a FIFO, device or socket); give a trace file or directory"
        )
    files = sorted(p for p in root.rglob("*.parquet") if p.is_file() and not p.name.startswith("."))
    if not files:
        raise BadInput(f"{root}: directory holds no .parquet files")
    return files


def read_meta(path: str | os.PathLike) -> TraceMeta:
    """Metadata of one trace file, after checking that it is a readable llmreplay trace."""
    return _open(Path(path))[1]


def _open(path: Path, pre_buffer: bool = True) -> tuple[pq.ParquetFile, TraceMeta]:
    try:
        handle = pq.ParquetFile(path, pre_buffer=pre_buffer)
        raw = (handle.schema_arrow.metadata or {}).get(METADATA_KEY)
    except (pa.ArrowException, OSError, ValueError) as exc:  # ValueError: a damaged footer's bad UTF-8
        raise BadInput(f"{path}: not a Parquet file ({first_line(exc)})") from None
    if raw is None:
        raise BadInput(f"{path}: not an llmreplay trace (no '{METADATA_KEY.decode()}' metadata key)")
    try:
        meta = parse_meta(raw)
        version_tuple(meta.format_version)
    except (ValueError, TypeError) as exc:
        raise BadInput(f"{path}: unreadable llmreplay metadata ({first_line(exc)})") from None
    why = refusal(meta.format_version)
    if why is not None:
        raise BadInput(f"{path}: {why}")
    _check_schema(path, handle.schema_arrow)
    return handle, meta


def _check_schema(path: Path, schema: pa.Schema) -> None:
    names = set(schema.names)
    for expected in trace_schema(False):
        name = expected.name
        if name not in names and name in ADDED_COLUMNS:
            continue  # written before the minor version that added it: read as nulls
        if name not in names:
            raise BadInput(f"{path}: column '{name}' is missing")
        _check_type(path, name, schema.field(name).type, expected.type)
    present = [name for name in CONTENT_COLUMN_NAMES if name in names]
    if present and not _has_content(schema):
        missing = sorted(set(CONTENT_COLUMN_NAMES) - set(present) - set(ADDED_COLUMNS))
        raise BadInput(f"{path}: content column '{missing[0]}' is missing (content columns come as a group)")
    for name in present:
        _check_type(path, name, schema.field(name).type, trace_schema(True).field(name).type)


def _check_type(path: Path, name: str, actual: pa.DataType, expected: pa.DataType) -> None:
    if actual == expected or _compatible(actual, expected):
        return
    raise BadInput(f"{path}: column '{name}' has type {actual}, expected {expected}")


def _compatible(actual: pa.DataType, expected: pa.DataType) -> bool:
    """Lossless-looking variants that a cast fixes: integer widths, string sizes, timestamp units."""
    if pa.types.is_integer(expected):
        return pa.types.is_integer(actual)
    if pa.types.is_floating(expected):
        return pa.types.is_floating(actual) or pa.types.is_integer(actual)
    if pa.types.is_string(expected):
        return pa.types.is_large_string(actual)
    if pa.types.is_timestamp(expected):
        return pa.types.is_timestamp(actual) and actual.tz is not None
    if pa.types.is_list(expected):
        return (pa.types.is_list(actual) or pa.types.is_large_list(actual)) and (
            actual.value_type == expected.value_type or _compatible(actual.value_type, expected.value_type)
        )
    if pa.types.is_struct(expected) and pa.types.is_struct(actual):
        return [f.name for f in actual] == [f.name for f in expected] and all(
            a.type == e.type or _compatible(a.type, e.type) for a, e in zip(actual, expected, strict=True)
        )
    return False


def _conform(path: Path, table: pa.Table, with_content: bool) -> pa.Table:
    try:
        table.validate(full=True)  # Parquet does not check UTF-8 or offsets on read; a damaged page may pass
    except pa.ArrowInvalid as exc:
        raise BadInput(f"{path}: corrupt Parquet data ({first_line(exc)})") from None
    # Nullable on read, so that a null in a required column is reported by row, not by cast.
    schema = pa.schema([f.with_nullable(True) for f in trace_schema(with_content)])
    for name in ADDED_COLUMNS:
        if name in schema.names and name not in table.column_names:
            table = table.append_column(schema.field(name), pa.nulls(table.num_rows, schema.field(name).type))
    table = table.select(schema.names)
    if table.schema.remove_metadata() == schema:
        return table
    try:
        return table.cast(schema.with_metadata(table.schema.metadata))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise BadInput(f"{path}: values do not fit the trace schema ({first_line(exc)})") from None


def _validate_rows(
    path: Path, table: pa.Table, row_offset: int, seen_ids: SeenRequestIds, meta: TraceMeta
) -> None:
    """Row checks that the schema cannot express: nulls, ranges, vocabularies, order, unique ids."""
    for expected in trace_schema(False):
        column = table.column(expected.name)
        if not expected.nullable and column.null_count:
            row = _first_index(pc.is_null(column))
            raise BadInput(f"{path}: column '{expected.name}' row {row_offset + row}: missing value")
    for name in NON_NEGATIVE_COLUMNS:
        column = table.column(name)
        negative = pc.fill_null(pc.less(column, 0), False)
        if pc.any(negative).as_py():
            row = _first_index(negative)
            value = column[row].as_py()
            raise BadInput(f"{path}: column '{name}' row {row_offset + row}: negative value {value}")
    for name, bound in UPPER_BOUNDS.items():
        column = table.column(name)
        if pa.types.is_timestamp(column.type):
            column = column.cast(pa.int64())
        if pa.types.is_list(column.type):
            _check_list_bound(path, name, column, bound, row_offset)
            continue
        out = pc.fill_null(pc.or_(pc.greater(column, bound), pc.less(column, 0)), False)
        if pc.any(out).as_py():
            row = _first_index(out)
            raise BadInput(
                f"{path}: column '{name}' row {row_offset + row}: value {column[row].as_py()} out of range "
                f"({_range_text(name, bound)})"
            )
    if knows_every_value(meta.format_version):  # a newer minor may add values: kept as they are
        _check_vocabularies(path, table, row_offset)
    _check_values_since(path, table, row_offset, meta.format_version)
    arrivals = table.column("arrival_time")
    if len(arrivals) > 1:
        backwards = pc.less(arrivals.slice(1), arrivals.slice(0, len(arrivals) - 1))
        if pc.any(backwards).as_py():
            row = _first_index(backwards) + 1
            raise BadInput(
                f"{path}: column 'arrival_time' row {row_offset + row}: rows are not sorted by arrival"
            )
    seen_ids.check(path, table.column("request_id").to_pylist(), row_offset)


def _check_vocabularies(path: Path, table: pa.Table, row_offset: int) -> None:
    for name, allowed in ENUM_COLUMNS.items():
        column = table.column(name)
        unknown = pc.and_(pc.is_valid(column), pc.invert(pc.is_in(column, value_set=pa.array(allowed))))
        if pc.any(unknown).as_py():
            row = _first_index(unknown)
            value = column[row].as_py()
            raise BadInput(
                f"{path}: column '{name}' row {row_offset + row}: unknown value {value!r} (one of {', '.join(allowed)})"
            )


def _check_values_since(path: Path, table: pa.Table, row_offset: int, version: str) -> None:
    for name, added in VALUES_SINCE.items():
        column = table.column(name)
        newer = [value for value in added if value_refusal(name, value, version)]
        if not newer:
            continue
        found = pc.fill_null(pc.is_in(column, value_set=pa.array(newer, pa.string())), False)
        if pc.any(found).as_py():
            row = _first_index(found)
            why = value_refusal(name, column[row].as_py(), version)
            raise BadInput(f"{path}: column '{name}' row {row_offset + row}: {why}")


def _check_list_bound(path: Path, name: str, column, bound: int, row_offset: int) -> None:
    for chunk in column.chunks if isinstance(column, pa.ChunkedArray) else [column]:
        values = pc.list_flatten(chunk)
        extremes = pc.min_max(values) if len(values) else None
        if extremes is None or (extremes["min"].as_py() >= 0 and extremes["max"].as_py() <= bound):
            row_offset += len(chunk)
            continue
        parents = pc.list_parent_indices(chunk)
        bad = pc.fill_null(pc.or_(pc.greater(values, bound), pc.less(values, 0)), False)
        item = _first_index(bad)
        raise BadInput(
            f"{path}: column '{name}' row {row_offset + parents[item].as_py()}: value {values[item].as_py()} "
            f"out of range ({_range_text(name, bound)})"
        )


def _range_text(name: str, bound: int) -> str:
    if name == "arrival_time":
        return "microseconds from 1970 to the year 2255"
    ns = bound * 1_000_000 if name.endswith("_ms") else bound
    return f"0 to {bound:,}, about {ns / 86_400e9:.0f} days"


class SeenRequestIds:
    """The request ids read so far, to refuse duplicates: 8 bytes a row (a 64-bit hash of each id in
    sorted numpy runs), where a set of the ids themselves takes about 100 bytes a row.

    A hash match is confirmed by re-reading the ids read before it, so only a real duplicate is
    reported, with the file and row of its first occurrence. `hash_id` is a parameter for tests.
    """

    def __init__(self, hash_id: Callable[[str], int] = hash):
        self._hash_id = hash_id  # Python's str hash: per-process seed, but only used within the run
        self._runs: list[np.ndarray] = []  # sorted; each at least twice the next, so few runs
        self._read: list[list] = []  # [file, rows] in reading order, for the exact re-check

    def check(self, path: Path, ids: list[str], row_offset: int) -> None:
        """Raise BadInput at the first id of `ids` (rows from `row_offset` of `path`) seen before."""
        if not ids:
            return
        hashes = np.fromiter(map(self._hash_id, ids), np.int64, len(ids))
        order = np.argsort(hashes, kind="stable")
        batch = hashes[order]
        suspect = np.zeros(len(ids), bool)
        suspect[order[1:][batch[1:] == batch[:-1]]] = True  # later rows of a hash repeated in the batch
        for run in self._runs:
            found = np.searchsorted(run, hashes)
            suspect |= run[np.minimum(found, len(run) - 1)] == hashes
        for row in np.flatnonzero(suspect).tolist():
            self._confirm(path, ids, row_offset, row)
        if self._read and self._read[-1][0] == path:
            self._read[-1][1] += len(ids)
        else:
            self._read.append([path, len(ids)])
        self._add(batch)

    def _add(self, batch: np.ndarray) -> None:
        runs = self._runs
        runs.append(batch)
        while len(runs) > 1 and len(runs[-2]) <= 2 * len(runs[-1]):
            top = runs.pop()
            merged = np.concatenate((runs.pop(), top))
            merged.sort()
            runs.append(merged)

    def _confirm(self, path: Path, ids: list[str], row_offset: int, row: int) -> None:
        request_id = ids[row]
        first = _index_of(ids, request_id, row)
        where = (path, row_offset + first) if first is not None else self._first_read(request_id)
        if where is not None:
            raise BadInput(
                f"{path}: column 'request_id' row {row_offset + row}: duplicate id {request_id!r} "
                f"(first seen in {where[0]} row {where[1]})"
            )

    def _first_read(self, request_id: str) -> tuple[Path, int] | None:
        """Where `request_id` occurs among the rows read before, re-read from their files."""
        for file, rows in self._read:
            with _reading(file):
                column = pq.read_table(file, columns=["request_id"]).column(0).slice(0, rows)
            index = pc.index(column, request_id).as_py()
            if index >= 0:
                return file, index
        return None


def _index_of(values: list, value, stop: int) -> int | None:
    try:
        return values.index(value, 0, stop)
    except ValueError:
        return None


def _first_index(mask) -> int:
    return pc.index(mask, True).as_py()




def read_trace(path: str | os.PathLike, columns: Iterable[str] | None = None) -> Trace:
    """Read and validate a whole trace, sorted by arrival (stable: ties keep file order)."""
    files = trace_files(path)
    tables, meta = [], None
    seen_ids = SeenRequestIds()
    for file in files:
        handle, file_meta = _open(file)
        meta = _merge_meta(meta, file_meta, file)
        with _reading(file):
            data = handle.read()
        table = _conform(file, data, with_content=_has_content(handle.schema_arrow))
        _validate_rows(file, table, 0, seen_ids, file_meta)
        tables.append(table)
    with_content = all(_has_content(t.schema) for t in tables)
    if not with_content:
        tables = [t.select(list(trace_schema(False).names)) for t in tables]
    table = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
    if len(files) > 1:
        table = table.take(pc.sort_indices(table, sort_keys=[("arrival_time", "ascending")]))
    if columns is not None:
        table = table.select(list(columns))
    return Trace(table=table, meta=meta.replace(content=with_content), files=tuple(files))


def iter_trace_batches(
    path: str | os.PathLike, batch_size: int = 65_536, columns: Iterable[str] | None = None
) -> tuple[TraceMeta, Iterator[pa.RecordBatch]]:
    """Stream a trace file by file in record batches, validating as it goes (flat memory).

    Files are taken in name order, so an hour-partitioned directory streams in arrival order.
    """
    files = trace_files(path)
    meta = None
    for file in files:
        meta = _merge_meta(meta, _open(file)[1], file)

    def batches() -> Iterator[pa.RecordBatch]:
        seen_ids = SeenRequestIds()
        for file in files:
            # pre_buffer keeps every compressed column chunk read until the file is closed: the whole
            # file, for a streaming reader (measured: RSS grew by the file size over the run).
            handle, file_meta = _open(file, pre_buffer=False)
            with_content = _has_content(handle.schema_arrow)
            offset = 0
            for batch in _read_batches(file, handle, batch_size):
                table = _conform(file, pa.Table.from_batches([batch]), with_content)
                _validate_rows(file, table, offset, seen_ids, file_meta)
                offset += table.num_rows
                if columns is not None:
                    table = table.select(list(columns))
                yield from table.to_batches()

    return meta, batches()


@contextmanager
def _reading(path: Path) -> Iterator[None]:
    """Damaged data pages (bad compression, truncated pages) become one line naming the file."""
    try:
        yield
    except (pa.ArrowException, OSError, EOFError) as exc:
        raise BadInput(f"{path}: corrupt Parquet data ({first_line(exc)})") from None


def _read_batches(path: Path, handle: pq.ParquetFile, batch_size: int) -> Iterator[pa.RecordBatch]:
    batches = handle.iter_batches(batch_size=batch_size)
    while True:
        with _reading(path):
            batch = next(batches, None)
        if batch is None:
            return
        yield batch


def _has_content(schema: pa.Schema) -> bool:
    """Content columns come as a group; one a later minor added reads as nulls when absent."""
    return all(name in schema.names for name in CONTENT_COLUMN_NAMES if name not in ADDED_COLUMNS)


def _merge_meta(current: TraceMeta | None, new: TraceMeta, file: Path) -> TraceMeta:
    if current is None:
        return new
    if current.block_size != new.block_size:
        raise BadInput(
            f"{file}: block size {new.block_size} differs from {current.block_size} in other files of the trace"
        )
    return current


def write_trace(path: str | os.PathLike, data: pa.Table | Iterable[TraceRecord], meta: TraceMeta) -> Path:
    """Write a whole trace file atomically (temporary name, fsync, rename)."""
    table = data if isinstance(data, pa.Table) else records_to_table(data, meta.content)
    with TraceWriter(path, meta) as writer:
        writer.write_table(table)
    return Path(path)


class TraceWriter:
    """Incremental writer for one trace file; the file appears under its name only on success.

    With `row_group_bytes`, small writes are gathered into row groups of about that many bytes (in
    memory, uncompressed) and at most `row_group_size` rows: the Parquet writer keeps about 40 KiB of
    metadata per row group until it closes, so a long stream of small row groups grows its memory.
    Without it, each write makes its own row groups (the caller batches).
    """

    def __init__(
        self,
        path: str | os.PathLike,
        meta: TraceMeta,
        row_group_size: int = 65_536,
        row_group_bytes: int = 0,
    ):
        self.path = Path(path)
        self.meta = meta
        self.schema = trace_schema(meta.content).with_metadata({METADATA_KEY: meta.to_json()})
        self._tmp = temp_path(self.path)
        self._writer: pq.ParquetWriter | None = None
        self._row_group_size = row_group_size
        self._row_group_bytes = row_group_bytes
        self._pending: list[pa.Table] = []
        self._pending_rows = self._pending_bytes = 0
        self.rows = 0

    def __enter__(self) -> TraceWriter:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._writer = pq.ParquetWriter(self._tmp, self.schema, compression="zstd")
        return self

    def write_table(self, table: pa.Table) -> None:
        table = table.select(self.schema.names).cast(self.schema)
        self.rows += table.num_rows
        self._pending.append(table)
        self._pending_rows += table.num_rows
        self._pending_bytes += table.nbytes
        if self._pending_rows >= self._row_group_size or self._pending_bytes >= self._row_group_bytes:
            self._flush()

    def write_records(self, records: Iterable[TraceRecord]) -> None:
        self.write_table(records_to_table(records, self.meta.content))

    def _flush(self) -> None:
        if self._pending:
            table = pa.concat_tables(self._pending) if len(self._pending) > 1 else self._pending[0]
            self._pending, self._pending_rows, self._pending_bytes = [], 0, 0
            self._writer.write_table(table, row_group_size=self._row_group_size)

    def __exit__(self, exc_type, exc, tb) -> None:
        complete = exc_type is None
        try:
            if complete:
                self._flush()
        except BaseException:
            complete = False  # an incomplete file goes, as on any other failure
            raise
        finally:
            self._writer.close()
            if not complete:
                self._tmp.unlink(missing_ok=True)
        if not complete:
            return
        if self.meta.content and not self.meta.anonymized:
            os.chmod(self._tmp, 0o600)  # real prompts and answers: private to the owner
        with open(self._tmp, "rb") as handle:
            os.fsync(handle.fileno())
        try:
            replace_file(self._tmp, self.path)  # never onto a directory, device or symbolic link
        finally:
            self._tmp.unlink(missing_ok=True)
