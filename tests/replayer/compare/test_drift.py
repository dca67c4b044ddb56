"""Soak drift: the last loop against the first through compare's paired machinery, and server trends."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from click.testing import CliRunner

from llmreplay.cli import cli
from llmreplay.run_format import RESULTS_FILE, RUN_FILE, SERVER_METRICS_FILE
from replayer.compare.config import CompareConfig
from replayer.compare.drift import drift_headline, soak_loops, trend
from replayer.compare.sides import soak_drift
from replayer.measured.side import load_side
from replayer.results.server_metrics import SERVER_METRICS_SCHEMA

GOLDEN = Path(__file__).resolve().parents[3] / "samples" / "golden" / "run-v1.4"
H = 3_600_000_000_000  # an hour in ns


TILES = 160  # 16 measured rows (8 successful) -> 1,280 successful: p99 has 10 values beyond it


def _renamed(table: pa.Table, k: int) -> pa.Table:
    """`table` with request ids of its own (copy `k`)."""
    for name in ("request_id", "source_request_id"):
        at = table.schema.get_field_index(name)
        renamed = pc.binary_join_element_wise(table.column(name), pa.scalar(f"#{k}"), "")
        table = table.set_column(at, table.schema.field(at), renamed)
    return table


def _looped(tmp_path: Path, slower: float, kv: list[float] | None = None, tiles: int = TILES) -> Path:
    """The golden run's measured rows, tiled to TILES requests so every percentile has the values it needs,
    as loop 0, again as loop 1 with latencies times `slower`."""
    run = tmp_path / "soak"
    shutil.copytree(GOLDEN, run)
    golden = pq.read_table(run / RESULTS_FILE)
    golden = golden.filter(pc.invert(golden.column("warmup")))
    table = golden if tiles == 1 else pa.concat_tables([_renamed(golden, k) for k in range(tiles)])
    again = table
    for name in ("ttft_ns", "ttfo_ns", "e2e_ns"):
        at = again.schema.get_field_index(name)
        scaled = pc.cast(pc.multiply(pc.cast(again.column(name), pa.float64()), slower), pa.int64())
        again = again.set_column(at, again.schema.field(at), scaled)
    for name in ("sent_offset_ns", "scheduled_offset_ns"):  # loop 1 comes one 3 s loop span later
        at = again.schema.get_field_index(name)
        again = again.set_column(at, again.schema.field(at), pc.add(again.column(name), 3_000_000_000))
    at = again.schema.get_field_index("loop")
    again = again.set_column(at, again.schema.field(at), pa.array([1] * again.num_rows, pa.int32()))
    pq.write_table(pa.concat_tables([table, again]), run / RESULTS_FILE)
    if kv is not None:
        rows = [(i * H // 4, i, "vllm:kv_cache_usage_perc", "", v) for i, v in enumerate(kv)]
        columns = list(zip(*rows, strict=True))
        pq.write_table(pa.table([pa.array(c, f.type) for c, f in zip(columns, SERVER_METRICS_SCHEMA, strict=True)],
                                schema=SERVER_METRICS_SCHEMA), run / SERVER_METRICS_FILE)  # fmt: skip
    return run


def test_a_run_without_loops_has_no_drift():
    assert soak_loops(np.zeros(5, np.int64)) is None and soak_loops(np.array([0, 1, 3])) == (0, 3)
    assert soak_loops(np.array([0, 0, 1, 1, 2, 2, 3])) == (0, 2)  # loop 3 was cut short by the soak's end
    assert soak_drift(load_side(GOLDEN, "run"), CompareConfig()) is None


def test_the_same_loop_twice_is_stable_and_a_doubled_one_drifted_up(tmp_path):
    same = soak_drift(load_side(_looped(tmp_path / "a", 1.0), "run"), CompareConfig())
    assert same["first_loop"] == 0 and same["last_loop"] == 1
    assert {c["verdict"] for c in same["cells"]["e2e"].values()} == {"stable"}
    assert same["headline"].startswith("stable") and same["findings"] == []
    slow = soak_drift(load_side(_looped(tmp_path / "b", 2.0), "run"), CompareConfig())
    cell = slow["cells"]["e2e"]["p50"]
    assert cell["verdict"] == "drifted_up" and abs(cell["ratio"] - 2.0) < 0.01 and cell["ci_low"] > 1.5
    assert set(slow["cells"]["ttft"]) == {"p50", "p95", "p99"} and "error_rate" in slow["cells"]
    assert slow["headline"].startswith("drifted up: ") and any("E2E p50" in f for f in slow["findings"])


def test_a_kv_usage_that_keeps_rising_is_a_finding_and_a_flat_one_is_not(tmp_path):
    rising = soak_drift(
        load_side(_looped(tmp_path / "a", 1.0, [0.1, 0.2, 0.3, 0.4, 0.5]), "run"), CompareConfig()
    )
    kv = rising["trends"]["kv_cache_usage"]
    assert (
        abs(kv["slope_per_hour"] - 0.4) < 1e-9 and kv["first"] == 0.1 and kv["last"] == 0.5 and kv["rising"]
    )
    assert any("kv_cache_usage rises" in f for f in rising["findings"])
    flat = trend([(i * H // 4, v) for i, v in enumerate([0.3, 0.31, 0.3, 0.29, 0.3])], share=True)
    assert not flat["rising"] and trend([(0, 1.0), (1, 2.0)]) is None  # two points: no trend


def test_report_of_a_soak_run_shows_the_drift_verdict(tmp_path):
    run = _looped(tmp_path, 2.0)
    out = CliRunner().invoke(cli, ["report", str(run), "--json"], catch_exceptions=False)
    drift = json.loads(out.output)["drift"]["run"]
    assert drift["cells"]["e2e"]["p99"]["verdict"] == "drifted_up"
    text = CliRunner().invoke(cli, ["report", str(run)], catch_exceptions=False).output
    assert "drift" in text and "drifted up" in text
    html = tmp_path / "report.html"
    CliRunner().invoke(cli, ["report", str(run), "--html", str(html)], catch_exceptions=False)
    assert "Soak drift" in html.read_text() and "Cold start" in html.read_text()


def test_headline_reads_the_cells():
    stable = {"ttft": {"p50": {"verdict": "stable"}}, "error_rate": {"verdict": "stable"}}
    assert drift_headline(stable).startswith("stable")
    assert drift_headline({"ttft": {"p50": {"verdict": "inconclusive"}}}).startswith("no drift shown")
    assert json.loads((GOLDEN / RUN_FILE).read_text())["phases"]["loops_completed"] == 1


def test_a_soak_run_compared_with_its_trace_judges_arrivals_on_its_first_loop(tmp_path):
    from replayer.compare.sides import compare_sides

    run = load_side(_looped(tmp_path, 1.0, tiles=1), "candidate")
    trace = load_side(GOLDEN.parent / "trace-v1.2.parquet", "baseline")
    result = compare_sides(trace, run, CompareConfig())
    arrival = next(c for c in result["fidelity"]["checks"] if c["check"].startswith("arrival-offset"))
    assert arrival["status"] == "ok", arrival  # loop 1 repeats loop 0 a span later: not an arrival error
    assert result["sides"]["candidate"]["copies"] == 16 and result["paired"]["pairs"] == 16
