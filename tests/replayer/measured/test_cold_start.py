"""The cold start: one rule (warm-up rows, else the first 10 s or 5% of the run), and the tail note."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from replayer.compare.sides import cold_start
from replayer.measured.cold_start import RULE, cold_window_ns, dominates, tail_share
from replayer.measured.side import load_side

GOLDEN = Path(__file__).resolve().parents[3] / "samples" / "golden"
S = 1_000_000_000


def test_the_cold_window_is_10_s_or_5_percent_of_the_run_whichever_is_shorter():
    assert cold_window_ns(np.array([0.0, 50 * S]), np.array([1.0, 100 * S])) == 5 * S
    assert cold_window_ns(np.array([0.0, 500 * S]), np.array([1.0, 1000 * S])) == 10 * S
    assert cold_window_ns(np.array([np.nan]), np.array([np.nan])) == 0.0


def test_cold_requests_dominate_a_tail_when_3x_over_represented_and_at_least_2():
    values = np.array([1.0] * 96 + [9.0, 9.0, 9.0, 9.0])
    cold = np.zeros(100, bool)
    cold[[96, 97, 0, 1, 2]] = True  # 5% of requests, 2 of the 4 above p99
    tail = tail_share(values, cold, percentile=95)
    assert tail["above"] == 4 and tail["cold_above"] == 2 and tail["over_representation"] == 10.0
    assert dominates(tail)
    cold[97] = False
    assert not dominates(tail_share(values, cold, percentile=95))  # one cold request is not a pattern


def test_a_warmed_up_run_s_cold_start_is_its_warm_up():
    section = cold_start(load_side(GOLDEN / "run-v1.4", "run"))
    assert section["source"] == "warmup" and section["requests"] == 5 and section["of"] == 21
    assert section["rule"] == RULE and set(section["metrics"]) == {"ttft", "e2e"}


def test_without_warm_up_the_cold_start_is_the_first_requests():
    section = cold_start(load_side(GOLDEN / "run-v1.3", "run"))
    assert section["source"] == "first_requests" and section["of"] == 21 and 1 <= section["requests"] < 21


def test_compare_of_a_warmed_up_run_with_its_trace_compares_the_measured_window_only():
    from replayer.compare.config import CompareConfig
    from replayer.compare.sides import compare_sides

    run = load_side(GOLDEN / "run-v1.4", "candidate")
    trace = load_side(GOLDEN / "trace-v1.2.parquet", "baseline")
    result = compare_sides(trace, run, CompareConfig())
    assert result["common_requests"] == {"common": 16, "baseline_only": 5, "candidate_only": 0}
    assert (
        result["sides"]["candidate"]["requests"] == 16 and result["cold_start"]["candidate"]["requests"] == 5
    )


def _slow_start_run(tmp_path, loops: int = 20):
    """The golden run's measured rows as `loops` back-to-back stretches of 3 s, the first one 20x slower."""
    import shutil

    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    run = tmp_path / "slow-start"
    shutil.copytree(GOLDEN / "run-v1.4", run)
    table = pq.read_table(run / "results.parquet")
    table = table.filter(pc.invert(table.column("warmup")))
    pieces = []
    for k in range(loops):
        piece = table
        changes = {"loop": pa.array([k] * table.num_rows, pa.int32()),
                   "sent_offset_ns": pc.add(table.column("sent_offset_ns"), k * 3 * S)}  # fmt: skip
        if k == 0:
            for name in ("ttft_ns", "e2e_ns"):
                changes[name] = pc.multiply(table.column(name), 20)
        for name, values in changes.items():
            at = piece.schema.get_field_index(name)
            piece = piece.set_column(at, piece.schema.field(at), values.cast(piece.schema.field(at).type))
        pieces.append(piece)
    pq.write_table(pa.concat_tables(pieces), run / "results.parquet")
    return run


def test_a_cold_start_that_dominates_the_tail_gets_a_note_that_suggests_a_warmup(tmp_path):
    section = cold_start(load_side(_slow_start_run(tmp_path), "run"))
    assert section["source"] == "first_requests" and section["requests"] == 16  # 5% of a 60 s run: 3 s
    tail = section["tails"]["e2e"]
    assert tail["cold_above"] == tail["above"] >= 2 and tail["over_representation"] == 20.0
    assert "dominates the TTFT p99 and E2E p99 tail" in section["note"] and "--warmup" in section["note"]
