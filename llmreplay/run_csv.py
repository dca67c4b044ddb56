"""`llmreplay export csv RUN -o requests.csv`: a run's results.parquet, one CSV row per request, for pandas
and spreadsheets: every column of the run format, durations in milliseconds, no nested lists.

- every `*_ns` column becomes `*_ms` (float milliseconds, same meaning);
- `chunk_offsets_ns` (a list) becomes `chunk_count`, and `tpot_ms` (llmreplay.metrics' TPOT of the row)
  and `itl_max_ms` (its largest gap between token-carrying chunks) are added after `e2e_ms`;
- timestamps are ISO 8601 in UTC, booleans `true`/`false`, missing values empty;
- a text cell starting like a formula (= + - @ tab CR) gets a leading `'`, so a hostile server's error
  body cannot run in a spreadsheet.
Warm-up rows are kept (column `warmup`): filter them as the verdict does. The file appears only when complete.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from llmreplay.errors import BadInput
from llmreplay.run_format import RESULTS_FILE, find_results, read_run

NS_SUFFIX, MS_SUFFIX = "_ns", "_ms"
LIST_COLUMN = "chunk_offsets_ns"
FORMULA_PATTERN = r"^[=+\-@\t\r]"


def results_path(path: Path) -> Path:
    """results.parquet of a run directory (or the file itself); BadInput otherwise."""
    found = find_results(path)
    if found is not None:
        return found
    if not path.exists():
        raise BadInput(f"{path}: no such file or directory")
    raise BadInput(f"{path}: not a replay run (no {RESULTS_FILE}); give a run directory")


def requests_table(results: pa.Table) -> pa.Table:
    """The results table in the CSV's shape (see the module's docstring)."""
    from llmreplay.metrics import BY_NAME

    names, arrays = [], []
    for name in results.column_names:
        column = results.column(name)
        if name == LIST_COLUMN:
            names.append("chunk_count")
            arrays.append(pc.list_value_length(column))
            continue
        if name.endswith(NS_SUFFIX) and pa.types.is_integer(column.type):
            names.append(name.removesuffix(NS_SUFFIX) + MS_SUFFIX)
            arrays.append(pc.divide(pc.cast(column, pa.float64()), 1e6))
        elif pa.types.is_timestamp(column.type):
            names.append(name)
            arrays.append(pc.strftime(column, format="%Y-%m-%dT%H:%M:%SZ" if column.type.tz else "%Y-%m-%dT%H:%M:%S"))
        elif pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
            names.append(name)
            arrays.append(safe_text(column))
        else:
            names.append(name)
            arrays.append(column)
        if name == "e2e_ns":
            names += ["tpot_ms", "itl_max_ms"]
            tpot, gaps = BY_NAME["tpot"].per_request(results), _largest_gap_ns(results.column(LIST_COLUMN))
            arrays += [_ms(tpot), _ms(gaps)]
    return pa.table(dict(zip(names, arrays, strict=True)))


def write_requests_csv(run: Path, out: Path, force: bool = False, flag: str = "-o") -> int:
    """The CSV of the run at `run` written to `out` atomically; how many rows."""
    import pyarrow.csv as pacsv

    from llmreplay.output_paths import atomic_output, check_output_file

    check_output_file(out, force, flag)  # before reading a large run
    table = read_run(results_path(Path(run)), "run").table
    rows = requests_table(table)
    with atomic_output(out, force, flag) as tmp:
        pacsv.write_csv(rows, tmp, pacsv.WriteOptions(quoting_style="needed"))
    return rows.num_rows


def safe_text(column) -> pa.ChunkedArray | pa.Array:
    """Text cells that a spreadsheet would run as a formula, with a leading quote."""
    formula = pc.fill_null(pc.match_substring_regex(column, FORMULA_PATTERN), False)
    if not pc.any(formula).as_py():
        return column
    return pc.if_else(formula, pc.binary_join_element_wise("'", column, ""), column)


def _ms(values_ns: np.ndarray) -> pa.Array:
    values = np.asarray(values_ns, dtype=np.float64) / 1e6
    return pa.array(values, pa.float64(), mask=~np.isfinite(values))


def _largest_gap_ns(chunks: pa.ChunkedArray) -> np.ndarray:
    """Per row, the largest gap between consecutive chunk offsets (NaN: fewer than two chunks)."""
    lists = chunks.combine_chunks() if isinstance(chunks, pa.ChunkedArray) else chunks
    out = np.full(len(lists), np.nan)
    if len(lists) == 0:
        return out
    lengths = np.asarray(pc.fill_null(pc.list_value_length(lists), 0).to_numpy(zero_copy_only=False))
    flat = np.asarray(pc.list_flatten(lists).to_numpy(zero_copy_only=False), dtype=np.float64)
    starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
    gaps = np.diff(flat) if flat.size > 1 else np.empty(0)
    ends = starts + lengths - 1  # a row's last value: the diff from it crosses into the next row
    gaps[ends[(lengths > 0) & (ends < gaps.size)]] = -np.inf
    rows = np.flatnonzero(lengths > 1)
    if rows.size:
        out[rows] = np.maximum.reduceat(gaps, starts[rows])
    return out
