"""Session turns wait for the previous answer plus the recorded think time (at the server's clock)."""

from __future__ import annotations

import pytest
from replay_helpers import content_record, results, run_info, run_replay, write_content_trace

pytestmark = pytest.mark.e2e  # every test here starts processes

THINK_MS = 150.0


def test_turns_respect_completion_plus_think_time(tmp_path, sim_with_truth):
    records = []
    for s in range(3):
        for turn in range(3):
            # recorded turns 5 ms apart: only the dependency can hold them back
            records.append(
                content_record(
                    s * 3 + turn,
                    s * 20.0 + turn * 5.0,
                    session_id=f"s{s}",
                    turn_index=turn,
                    think_time_ns=round(THINK_MS * 1e6) if turn else None,
                    completion_tokens=25,
                )
            )
    records.sort(key=lambda r: r.arrival_time)
    trace = write_content_trace(tmp_path / "t.parquet", records)
    url, truth = sim_with_truth("--profile", "fast")
    out = tmp_path / "run"
    done = run_replay(trace, url, out, "--engine", "vllm", "--session-header", "X-Session-Affinity")
    assert done.returncode in (0, 1), done.stderr
    server = truth()
    rows = {r["request_id"]: r for r in results(out)}
    assert len(rows) == 9 and all(r["error_kind"] is None for r in rows.values())
    for s in range(3):
        for turn in (1, 2):
            previous, current = server[f"r{s * 3 + turn - 1}"], server[f"r{s * 3 + turn}"]
            gap_ms = (current["arrival_mono_ns"] - previous["last_token_mono_ns"]) / 1e6
            assert THINK_MS - 1.0 < gap_ms < THINK_MS + 30.0, (s, turn, gap_ms)
            assert rows[f"r{s * 3 + turn}"]["session_wait_ns"] > 100e6
    assert run_info(out)["config"]["session_header"] == "X-Session-Affinity"
