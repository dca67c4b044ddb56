"""Resume decisions of a step directory, and a rerun with changed settings refused in one line."""

import json

import pytest
from compare_fixtures import run_document

from llmreplay.errors import BadInput
from replayer.capacity.document import read_capacity, refuse_changed, write_capacity
from replayer.capacity.step import FRESH, RERUN, REUSE, resume_action


def test_step_directory_decisions(tmp_path):
    assert resume_action(tmp_path / "missing") == FRESH
    killed = tmp_path / "killed"
    (killed / ".parts").mkdir(parents=True)
    assert resume_action(killed) == RERUN
    done = tmp_path / "done"
    done.mkdir()
    (done / "results.parquet").write_bytes(b"x")
    (done / "run.json").write_text(json.dumps(run_document(stop_reason="completed")))
    assert resume_action(done) == REUSE
    (done / "run.json").write_text(json.dumps(run_document(stop_reason="interrupted")))
    assert resume_action(done) == RERUN
    (done / "run.json").write_text('{"stop_reason": "comp')  # killed mid-write
    assert resume_action(done) == RERUN


def test_changed_settings_refuse_and_same_settings_continue(tmp_path):
    settings = {
        "trace_path": "t.parquet",
        "target_url": "http://127.0.0.1:1",
        "slos": ["tpot_p95<=13ms"],
        "by": "scale",
    }
    write_capacity(tmp_path, {"format": "llmreplay.capacity", "format_version": "1.0", "settings": settings})
    previous = read_capacity(tmp_path)
    refuse_changed(previous, settings, tmp_path)
    with pytest.raises(BadInput, match="another by"):
        refuse_changed(previous, {**settings, "by": "speed"}, tmp_path)


def test_a_foreign_capacity_file_is_one_line(tmp_path):
    (tmp_path / "capacity.json").write_text("{not json")
    with pytest.raises(BadInput, match="not JSON"):
        read_capacity(tmp_path)
