"""One run per directory: a replay into a directory that holds a run, or a dead run's `.parts/`, is
refused before any request is built or sent: one line naming the directory and what is in it, with
the fix, exit status 2. (The kill -9 tests refuse a real dead run's directory the same way.)"""

from __future__ import annotations

import pytest
from replay_helpers import content_record, results, run_replay, write_content_trace

pytestmark = pytest.mark.e2e  # every test here starts processes


def _snapshot(directory):
    return {p.relative_to(directory): p.stat().st_mtime_ns for p in directory.rglob("*")}


def test_a_finished_run_is_not_overwritten(tmp_path, shared_sim):
    trace = write_content_trace(tmp_path / "t.parquet", [content_record(i, i * 10.0) for i in range(3)])
    out = tmp_path / "run"
    first = run_replay(trace, shared_sim, out, "--engine", "vllm")
    assert first.returncode in (0, 1), first.stderr
    assert len(results(out)) == 3
    before = _snapshot(out)
    again = run_replay(trace, shared_sim, out, "--engine", "vllm")
    assert again.returncode == 2 and again.stderr.strip().count("\n") == 0, again.stderr
    line = again.stderr.strip()
    assert f"-o {out}: already holds a run (results.parquet, run.json)" in line
    assert "new -o directory" in line and "delete" in line
    assert _snapshot(out) == before  # nothing touched, no .parts/ made


def test_a_dead_runs_leftovers_are_refused(tmp_path):
    trace = write_content_trace(tmp_path / "t.parquet", [content_record(0, 0.0)])
    out = tmp_path / "run"
    (out / ".parts").mkdir(parents=True)
    (out / ".parts" / ".results-0.marshal.partial").write_bytes(b"\x00half a frame")
    before = _snapshot(out)
    # the check comes before the target is probed: nothing listens on port 9
    again = run_replay(trace, "http://127.0.0.1:9", out, "--engine", "vllm")
    assert again.returncode == 2 and again.stderr.strip().count("\n") == 0, again.stderr
    line = again.stderr.strip()
    assert f"-o {out}: holds .parts/" in line and "killed" in line
    assert f"delete {out / '.parts'}" in line and "new -o directory" in line
    assert "Traceback" not in again.stderr and "marshal" not in again.stderr
    assert _snapshot(out) == before
