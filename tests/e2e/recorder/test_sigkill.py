"""SIGKILL the recorder under ~60 req/s of mixed traffic: nothing completed at the client is lost.

The short version of benchmarks/bench_recorder_sigkill.py (run it for the >= 20-kill figures); the
driver, the classification of requests and the trace check are the benchmark's own, loaded from there.
"""

from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e  # every test here starts processes

BENCH = Path(__file__).resolve().parents[3] / "benchmarks" / "bench_recorder_sigkill.py"


def load_bench():
    spec = importlib.util.spec_from_file_location("bench_recorder_sigkill", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


@pytest.mark.timeout(90)
def test_three_sigkills_under_mixed_traffic_lose_no_completed_request(tmp_path):
    bench = load_bench()
    started = time.monotonic()
    settings = bench.Settings(
        kills=3, rate=60, seed=7, work=tmp_path, max_up_s=1.5, max_seconds=30, quiet=True
    )
    report = bench.run(settings)  # stops every process it started, also when it fails
    assert time.monotonic() - started < 40
    figures = report.figures
    rows = figures["rows_by_name"]

    assert len(report.kills) == 3
    assert len(report.calls) / report.traffic_s >= 50  # Poisson arrivals at 60 req/s offered
    assert {c.kind for c in report.completed} == set(bench.KINDS)
    assert len(report.completed) >= 100
    assert [(c.name, round(c.end, 6)) for c in report.lost] == []  # completed at the client, yet no row
    assert report.read_error is None  # read_trace refuses duplicate request ids
    assert report.duplicate_ids == report.duplicate_users == 0
    assert figures["unknown_rows"] == 0
    assert all(rows[c.name]["error_kind"] is None for c in report.completed)
    assert not [c.name for c in figures["refused"] if c.name in rows]  # never reached a proxy
    assert not figures["other_failed"], [c.error for c in figures["other_failed"]][:5]
    assert all(k.orphans >= 1 and k.orphans_gone_s is not None for k in report.kills), report.kills
    assert report.stop_returncode == 0 and report.leftover_frames == 0
    assert "Every journaled request is filed in Parquet." in report.stop_summary
