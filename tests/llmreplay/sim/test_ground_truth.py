"""The Parquet spool: batches written off the loop, the file appears only when closed."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa
import pyarrow.parquet as pq

from llmreplay.sim import ground_truth
from llmreplay.sim.ground_truth import ParquetSpool, steps_log_path

COLUMNS = (("n", pa.int64(), False), ("name", pa.string(), True))


def test_rows_survive_flushes_and_row_groups(tmp_path, monkeypatch):
    monkeypatch.setattr(ground_truth, "ROW_GROUP_ROWS", 5000)
    path = tmp_path / "log.parquet"
    with ThreadPoolExecutor(1) as pool:
        spool = ParquetSpool(path, COLUMNS, pool)
        for n in range(12_345):
            spool.append((n, None if n % 7 else f"r{n}"))
            if n % 3000 == 0:
                spool.flush()
        assert not path.exists()  # nothing under the final name before close
        spool.close().result()
    assert [p.name for p in tmp_path.iterdir()] == ["log.parquet"]
    table = pq.read_table(path)
    assert table.column("n").to_pylist() == list(range(12_345))
    assert table.column("name").to_pylist()[:8] == ["r0", None, None, None, None, None, None, "r7"]
    assert pq.ParquetFile(path).metadata.num_row_groups == 3


def test_an_empty_log_is_still_a_valid_file(tmp_path):
    path = tmp_path / "empty.parquet"
    with ThreadPoolExecutor(1) as pool:
        ParquetSpool(path, COLUMNS, pool).close().result()
    table = pq.read_table(path)
    assert table.num_rows == 0 and table.column_names == ["n", "name"]
    assert steps_log_path(path).name == "empty.steps.parquet"
