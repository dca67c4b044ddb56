"""--warmup and --soak end to end against a real `llmreplay sim`: a 3 s trace, 1 s of it warm-up, the
rest looped for 12 s; rows say their phase and loop, the sim saw every loop under its own id, and the
run's summary and `report` carry the cold start and the drift verdict."""

from __future__ import annotations

import json
import subprocess

import pytest
from live_processes import ROOT, llmreplay_cmd
from replay_helpers import content_record, results, run_info, run_replay, write_content_trace

pytestmark = pytest.mark.e2e  # starts a sim and a replay process


def test_a_warmed_up_soak_loops_the_window_and_reports_its_drift(sim_with_truth, tmp_path):
    url, truth = sim_with_truth("--profile", "fast")
    trace = write_content_trace(tmp_path / "t.parquet", [content_record(i, i * 200.0) for i in range(16)])
    out = tmp_path / "run"
    done = run_replay(trace, url, out, "--skip-preflight", "--warmup", "1s", "--soak", "12s", timeout_s=120)
    assert done.returncode in (0, 1), done.stderr[-2000:]
    rows = results(out)
    warm = [r for r in rows if r["warmup"]]
    assert sorted(r["request_id"] for r in warm) == [f"r{i}" for i in range(5)]  # 0..0.8 s: the warm-up
    assert all(r["loop"] == 0 for r in warm)
    phases = run_info(out)["phases"]
    # measured r5..r15 (1.0..3.0 s): a loop is 2.0 s + the 0.2 s median gap; 12 s hold 6 loops (the last cut)
    assert phases["loop_span_s"] == pytest.approx(2.2) and phases["loops_planned"] == 6
    assert phases["warmup_s"] == 1.0 and phases["loops_completed"] >= 5
    loops = {r["loop"] for r in rows if not r["warmup"]}
    assert loops == set(range(6))
    assert {r["request_id"] for r in rows if r["loop"] == 2} <= {f"r{i}#l2" for i in range(5, 16)}
    sent = sorted(r["sent_offset_ns"] for r in rows if r["loop"] == 1)
    assert sent[0] >= 0.5e9 + 2.2e9 - 5e7  # loop 1 starts one loop span after the measured window
    assert len({r["request_id"] for r in rows}) == len(rows)
    seen = truth()
    assert all(r["request_id"] in seen for r in rows if r["sent_offset_ns"] is not None)
    summary = run_info(out)["summary"]
    assert summary["requests"] == len(rows) - 5  # the replay's own verdict leaves the warm-up out
    assert summary["cold_start"]["source"] == "warmup"
    assert summary["drift"]["last_loop"] == 4  # the last complete loop: the soak's end cut loop 5 short
    report = subprocess.run(llmreplay_cmd("report", str(out), "--json"), capture_output=True, text=True,
                            timeout=120, cwd=ROOT)  # fmt: skip
    drift = json.loads(report.stdout)["drift"]["run"]
    assert set(drift["cells"]) == {"ttft", "tpot", "e2e", "error_rate"}
    assert drift["common_requests"]["common"] >= 1 and drift["headline"]
