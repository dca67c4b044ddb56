"""Hostile streams (issue 26, 4 and 5): an endless SSE stream cut by --duration/--grace leaves a run
(results.parquet, run.json, stop_reason "duration", the requests cut with `shutdown`) and a replay whose
memory did not grow with it; a 10 MB unterminated SSE line is an invalid_response, not a buffer."""

from __future__ import annotations

import pytest
from hostile_target import HostileTarget, run_watched
from replay_helpers import ROOT, content_record, replay_cmd, results, run_info, write_content_trace

from replayer.coordinator import PARTS_DIR

pytestmark = pytest.mark.e2e  # every test here starts a replay process
MAX_RSS_MB = 300


@pytest.fixture
def trace(tmp_path):
    return write_content_trace(tmp_path / "t.parquet", [content_record(i, i * 100.0) for i in range(3)])


def test_an_endless_stream_cut_by_duration_and_grace_leaves_a_run_in_bounded_memory(trace, tmp_path):
    out = tmp_path / "run"
    with HostileTarget(chat="endless") as target:
        args = ("--engine", "openai", "--skip-preflight", "--duration", "3s", "--grace", "1s")
        done = run_watched(replay_cmd(trace, target.url, out, *args), 60, 1500, cwd=ROOT)
    assert done.killed is None and done.returncode in (0, 1), done.stderr[-2000:]
    info = run_info(out)
    assert info["stop_reason"] == "duration"
    rows = results(out)
    assert len(rows) == 3 and all(r["error_kind"] == "shutdown" and r["http_status"] == 200 for r in rows)
    assert not (out / PARTS_DIR).exists()
    worker_mb = max(w["max_rss_mb"] for w in info["workers"])
    assert worker_mb < MAX_RSS_MB and info["coordinator_max_rss_mb"] < MAX_RSS_MB, (worker_mb, info)


def test_a_10_mb_unterminated_sse_line_is_an_invalid_response(trace, tmp_path):
    out = tmp_path / "run"
    with HostileTarget(chat="long_line") as target:
        args = ("--engine", "openai", "--skip-preflight", "--duration", "5s", "--grace", "1s")
        done = run_watched(replay_cmd(trace, target.url, out, *args), 60, 1500, cwd=ROOT)
    assert done.killed is None and done.returncode in (0, 1), done.stderr[-2000:]
    rows = results(out)
    assert [r["error_kind"] for r in rows] == ["invalid_response"] * 3, rows
    assert all(r["error_detail"] == "an SSE event longer than 1 MB" for r in rows)
    assert max(w["max_rss_mb"] for w in run_info(out)["workers"]) < MAX_RSS_MB
