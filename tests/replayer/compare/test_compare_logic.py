"""Pure comparison logic on tiny tables: ITL agrees with llmreplay.metrics, windows, joins, buckets."""

from __future__ import annotations

import datetime

import numpy as np
import pyarrow as pa
import pytest
from compare_fixtures import Shape, latencies_ns, run_document, write_run

from llmreplay.metrics import itl_values_ns
from llmreplay.run_format import RESULT_SCHEMA, run_info_from_json
from replayer.compare.load import load_windows, window_width_s
from replayer.compare.sides import CompareConfig, compare_sides, summarize_side
from replayer.measured.requests import build_requests, time_scale
from replayer.measured.side import RUN, Side, load_side

T0 = datetime.datetime(2025, 1, 1, tzinfo=datetime.UTC)


def tiny_run(rows: list[dict]) -> Side:
    """A run from a few hand-written rows; unspecified columns get neutral values."""
    full = []
    for i, row in enumerate(rows):
        base = {name: None for name in RESULT_SCHEMA.names}
        base.update(
            request_id=f"r{i}",
            source_request_id=f"r{i}",
            turn_index=0,
            copy_index=0,
            worker=0,
            arrival_time=T0 + datetime.timedelta(milliseconds=row.get("arrival_ms", 0)),
            endpoint="chat_completions",
            stream=True,
            tools_count=0,
            structured_output="none",
            scheduled_offset_ns=0,
            session_wait_ns=0,
            http_status=200,
        )
        base.update({k: v for k, v in row.items() if k != "arrival_ms"})
        full.append(base)
    return Side(
        "candidate", __import__("pathlib").Path("tiny"), RUN, pa.Table.from_pylist(full, schema=RESULT_SCHEMA)
    )


def test_itl_per_row_equals_the_shared_metric_definition():
    side = tiny_run(
        [
            {
                "chunk_offsets_ns": [10, 15, 30],
                "ttft_ns": 10,
                "e2e_ns": 30,
                "completion_tokens": 3,
                "sent_offset_ns": 0,
            },
            {
                "chunk_offsets_ns": [5, 6],
                "error_kind": "stream_truncated",
                "sent_offset_ns": 1,
            },  # failed: no gaps
            {"chunk_offsets_ns": None, "stream": False, "e2e_ns": 9, "sent_offset_ns": 2},
            {"chunk_offsets_ns": [100, 200, 400, 401], "ttft_ns": 100, "e2e_ns": 401, "sent_offset_ns": 3},
        ]
    )
    req = build_requests(side)
    assert req.itl_gaps_ns.tolist() == [5, 15, 100, 200, 1]
    assert req.itl_owner.tolist() == [0, 0, 3, 3, 3]
    assert np.sort(req.itl_gaps_ns).tolist() == np.sort(itl_values_ns(side.table)).tolist()


def test_ttft_of_non_streamed_requests_is_left_out():
    side = tiny_run(
        [
            {"stream": True, "ttft_ns": 10, "e2e_ns": 50, "completion_tokens": 5, "sent_offset_ns": 0},
            {"stream": False, "ttft_ns": 40, "e2e_ns": 40, "completion_tokens": 5, "sent_offset_ns": 0},
        ]
    )
    latency = build_requests(side).latency_ns
    assert latency["ttft"][0] == 10 and np.isnan(latency["ttft"][1])
    assert latency["tpot"][0] == 10 and np.isnan(latency["tpot"][1])
    assert latency["e2e"].tolist() == [50, 40]


def test_load_windows_count_rates_inflight_and_errors():
    # Two requests in the first second (one failed), one in the second; speed 1.
    side = tiny_run(
        [
            {"sent_offset_ns": 0, "e2e_ns": 2_000_000_000, "completion_tokens": 10, "ttft_ns": 1},
            {
                "sent_offset_ns": 500_000_000,
                "e2e_ns": 100_000_000,
                "error_kind": "http_5xx",
                "http_status": 500,
            },
            {"sent_offset_ns": 1_200_000_000, "e2e_ns": 100_000_000, "completion_tokens": 4, "ttft_ns": 1},
        ]
    )
    req = build_requests(side)
    windows = load_windows(req, scale=1.0, width_trace_s=1.0, count=3)
    assert windows["requests_per_s"] == [2.0, 1.0, 0.0]
    assert windows["error_rate"] == [0.5, 0.0, None]
    assert windows["output_tokens_per_s"] == [0.0, 4.0, 10.0]  # counted when each request ends
    assert windows["inflight_max"][0] == 2 and windows["inflight_max"][2] == 0


def test_window_width_is_a_nice_number():
    assert window_width_s(30) == 0.5
    assert window_width_s(3600) == 60
    assert window_width_s(86_400) == 1800


def test_speed_comes_from_run_json_schedule(tmp_path):
    shape = Shape(n=20)
    run = write_run(tmp_path / "run", shape, *latencies_ns(shape, seed=1), speed=4.0, config={"speed": None})
    side = load_side(run, "candidate")
    stated = run_info_from_json(run_document(speed=3.0), "test")
    nested = Side(side.label, side.path, side.kind, side.table, {}, stated)
    assert time_scale(nested, build_requests(nested)) == 3.0
    estimated = Side(side.label, side.path, side.kind, side.table, {}, None)
    assert time_scale(estimated, build_requests(estimated)) == pytest.approx(4.0, rel=1e-3)


def test_compare_restricts_to_common_ids_and_reports_the_rest(tmp_path):
    shape = Shape(n=50)
    ttft, tpot = latencies_ns(shape, seed=1)
    baseline = load_side(write_run(tmp_path / "a", shape, ttft, tpot), "baseline")
    candidate = load_side(write_run(tmp_path / "b", shape, ttft, tpot), "candidate")
    window = candidate.table.slice(0, 30)  # a replay of part of the trace
    partial = Side(candidate.label, candidate.path, candidate.kind, window, candidate.config, candidate.run)
    result = compare_sides(baseline, partial, CompareConfig())
    assert result["common_requests"] == {"common": 30, "baseline_only": 20, "candidate_only": 0}
    assert result["sides"]["baseline"]["requests"] == 30
    coverage = next(c for c in result["fidelity"]["checks"] if c["check"].startswith("requests compared"))
    assert coverage["status"] == "ok"


def test_unfaithful_replay_fails_before_any_latency_verdict(tmp_path):
    shape = Shape(n=200)
    ttft, tpot = latencies_ns(shape, seed=1)
    baseline = load_side(write_run(tmp_path / "a", shape, ttft, tpot), "baseline")
    shed = {i: "shed_by_client" for i in range(0, 200, 10)}  # 10 % never sent
    candidate = write_run(tmp_path / "b", shape, ttft, tpot, errors=shed, lag_ns=200_000_000)
    result = compare_sides(baseline, load_side(candidate, "candidate"), CompareConfig())
    reasons = result["verdict"]["reasons"]
    assert result["fidelity"]["unfaithful"] and result["verdict"]["exit_code"] == 1
    assert any("dispatch lag" in r for r in reasons)
    assert result["verdict"]["rows"][0]["kind"] == "fidelity"
    # shed requests are the client's doing: not engine errors
    assert result["errors"]["candidate"]["engine_errors"] == 0


def test_single_run_summary_has_no_latency_verdicts(tmp_path):
    shape = Shape(n=30)
    side = load_side(write_run(tmp_path / "a", shape, *latencies_ns(shape, seed=1)), "run")
    result = summarize_side(side, CompareConfig())
    assert result["mode"] == "report" and result["verdict"]["status"] == "pass"
    assert "comparison" not in result["latency"]["ttft"] and result["latency"]["ttft"]["run"]["count"] > 0
