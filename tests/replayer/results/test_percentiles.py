"""Percentiles from values read in passes equal np.percentile's to the last bit (the run summary's
ITL is computed this way so that it need not hold every inter-chunk gap)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import replayer.results.percentiles as sp
from llmreplay.metrics import PERCENTILES, percentiles
from llmreplay.run_format import RESULT_SCHEMA
from replayer.results import summary


def batches(values: np.ndarray, size: int):
    return lambda: (values[i : i + size] for i in range(0, len(values), size))


CASES = {
    "gaps": np.random.default_rng(1).lognormal(15, 1, 5_000).round(),
    "ties": np.random.default_rng(2).integers(0, 7, 3_000).astype(float),
    "one value": np.array([42.0]),
    "all equal": np.full(1_000, 5e6),
    "two": np.array([1.0, 1e12]),
    "with nan and inf": np.array([3.0, np.nan, 1.0, np.inf, 2.0, -np.inf, 2.0]),
}


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("bins, limit", [(4096, 200_000), (4, 3)])  # (4, 3): many narrowing passes
def test_streamed_percentiles_equal_numpy(name, bins, limit, monkeypatch):
    monkeypatch.setattr(sp, "BINS", bins)
    monkeypatch.setattr(sp, "COLLECT_LIMIT", limit)
    values = CASES[name]
    qs = (*PERCENTILES, 0, 100, 33.3)
    count, got = sp.streamed_percentiles(batches(values, 97), qs, scale=1e6)
    assert count == int(np.isfinite(values).sum())
    assert got == percentiles(values / 1e6, qs)


def test_no_values_gives_none():
    assert sp.streamed_percentiles(batches(np.array([np.nan]), 10), (50,)) == (0, {"p50": None})


def test_summary_of_a_results_file_equals_the_summary_of_its_table(tmp_path, monkeypatch):
    monkeypatch.setattr(summary, "ITL_BATCH_ROWS", 7)  # many batches
    rng = np.random.default_rng(3)
    rows = []
    for i in range(60):
        sent = i % 10 != 9
        chunks = np.cumsum(rng.integers(1_000, 9_000_000, rng.integers(0, 30))).tolist()
        rows.append(
            dict(
                request_id=f"r{i}", turn_index=0, arrival_time=0, endpoint="chat_completions", stream=True,
                tools_count=0, structured_output="none", source_request_id=f"r{i}", copy_index=0, worker=0,
                scheduled_offset_ns=i * 1000, session_wait_ns=0,
                sent_offset_ns=i * 1000 + 5 if sent else None, dispatch_lag_ns=5 if sent else None,
                http_status=(500 if i % 7 == 0 else 200) if sent else None,
                error_kind=None if sent and i % 7 else ("http_5xx" if sent else "shed_by_client"),
                ttft_ns=chunks[0] if chunks and sent else None, e2e_ns=(chunks[-1] + 10) if chunks else None,
                completion_tokens=len(chunks), chunk_offsets_ns=chunks if sent else None,
                warmup=i < 6, loop=0,
            )
        )  # fmt: skip
    table = pa.Table.from_pylist(rows, schema=RESULT_SCHEMA)
    pq.write_table(table, tmp_path / "results.parquet", row_group_size=11)
    measured = summary.summarize(table.slice(6))  # warm-up rows are in no verdict
    assert summary.summarize_file(tmp_path / "results.parquet") == measured
    assert measured["requests"] == 54 and measured != summary.summarize(table)
