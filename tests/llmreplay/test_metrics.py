"""Metric definitions with numbers you can check by eye."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from llmreplay.metrics import itl_values_ns, latency_summary_ms, per_request_latencies_ns, percentiles
from llmreplay.trace_shape import peak_rate, prefix_sharing_ratio


def table(**columns) -> pa.Table:
    n = len(next(iter(columns.values())))
    base = {
        "error_kind": pa.array([None] * n, pa.string()),
        "http_status": pa.array([200] * n, pa.int16()),
        "ttft_ns": pa.array([None] * n, pa.int64()),
        "e2e_ns": pa.array([None] * n, pa.int64()),
        "completion_tokens": pa.array([None] * n, pa.int32()),
        "chunk_offsets_ns": pa.array([None] * n, pa.list_(pa.int64())),
    }
    base.update(columns)
    return pa.table(base)


def test_ttft_tpot_e2e_per_request():
    t = table(
        ttft_ns=pa.array([10, 20, 30], pa.int64()),
        e2e_ns=pa.array([110, 20, 60], pa.int64()),
        completion_tokens=pa.array([11, 1, 4], pa.int32()),
        error_kind=pa.array([None, None, "http_5xx"]),
    )
    lat = per_request_latencies_ns(t)
    assert lat["ttft"][:2].tolist() == [10, 20] and np.isnan(lat["ttft"][2])
    assert lat["tpot"][0] == 10  # (110 - 10) / (11 - 1)
    assert np.isnan(lat["tpot"][1])  # one token: TPOT undefined
    assert np.isnan(lat["e2e"][2])  # failed requests are not latency samples


def test_itl_pools_gaps_within_requests_only():
    t = table(chunk_offsets_ns=pa.array([[], [10, 20, 40], None, [5], [1, 2]], pa.list_(pa.int64())))
    assert itl_values_ns(t).tolist() == [10, 20, 1]


def test_itl_skips_failed_requests():
    t = table(
        chunk_offsets_ns=pa.array([[0, 5], [0, 100]], pa.list_(pa.int64())),
        http_status=pa.array([200, 503], pa.int16()),
    )
    assert itl_values_ns(t).tolist() == [5]


def test_percentiles_and_summary():
    assert percentiles(np.array([1.0, 2.0, 3.0, 4.0, np.nan]), (50,)) == {"p50": 2.5}
    assert percentiles(np.array([np.nan]), (99,)) == {"p99": None}
    t = table(ttft_ns=pa.array([1_000_000, 3_000_000], pa.int64()))
    assert latency_summary_ms(t, (50,))["ttft"] == {"count": 2, "p50": 2.0}


def test_prefix_sharing_and_peak_rate():
    hashes = pa.array([[1, 2], [1, 3], [1, 2, 4]], pa.list_(pa.int64()))
    assert prefix_sharing_ratio(hashes) == 3 / 7  # blocks 1 (twice) and 2 (once) seen before
    assert peak_rate(np.array([0.0, 0.1, 0.2, 1.5, 3.0]), 1.0) == 3.0


def test_every_metric_row_reads_columns_both_sides_have():
    import pyarrow.parquet as pq

    from llmreplay.metrics import METRICS
    from llmreplay.run_format import RESULTS_FILE

    golden = Path(__file__).parents[2] / "samples" / "golden"
    trace = set(pq.read_schema(sorted(golden.glob("trace-*.parquet"))[-1]).names)  # the current versions
    runs = [set(pq.read_schema(p / RESULTS_FILE).names) for p in sorted(golden.glob("run-v*"))[-1:]]
    assert runs
    for metric in METRICS:
        assert set(metric.columns) <= trace and all(set(metric.columns) <= run for run in runs), metric.name


def test_ttfb_is_a_per_request_row_that_never_gates():
    from llmreplay.metrics import BY_NAME, GATING, JUDGED_CELLS

    t = table(ttfb_ns=pa.array([4, None], pa.int64()), http_status=pa.array([200, 200], pa.int16()))
    assert per_request_latencies_ns(t)["ttfb"][0] == 4 and np.isnan(per_request_latencies_ns(t)["ttfb"][1])
    assert BY_NAME["ttfb"] not in GATING and JUDGED_CELLS == 20  # TTFT, TTFO, TPOT, ITL, E2E x 4
