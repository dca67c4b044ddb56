"""`llmreplay demo`'s output directory: its own (a marker), cleared of what it wrote, never anyone else's."""

from __future__ import annotations

import subprocess
import sys

import pytest

from llmreplay.demo import DEMO_ENTRIES, MARKER, prepare_out_dir
from llmreplay.errors import BadInput


def _fill_like_a_run(out):
    (out / "recorded").mkdir()
    (out / "recorded" / "trace-old.parquet").write_bytes(b"old")
    (out / "run").mkdir()
    (out / "run" / "results.parquet").write_bytes(b"old")
    (out / "logs").mkdir()
    (out / "anonymized.parquet").write_bytes(b"old")
    (out / "report.html").write_text("old")


def test_a_new_directory_gets_the_marker_and_nothing_else(tmp_path):
    out = tmp_path / "a" / "demo-out"
    prepare_out_dir(out)
    assert [p.name for p in out.iterdir()] == [MARKER]


def test_a_second_run_removes_the_demos_entries_only(tmp_path):
    out = tmp_path / "demo-out"
    prepare_out_dir(out)
    _fill_like_a_run(out)
    (out / "notes.txt").write_text("mine")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "keep").write_text("keep")
    (out / ".mitmproxy").symlink_to(outside, target_is_directory=True)
    prepare_out_dir(out)
    assert sorted(p.name for p in out.iterdir()) == sorted([MARKER, "notes.txt"])
    assert (outside / "keep").read_text() == "keep"  # a link goes, never what it points to
    assert set(DEMO_ENTRIES) >= {"recorded", "run", "logs", "anonymized.parquet", "report.html"}


def test_an_empty_directory_is_taken(tmp_path):
    prepare_out_dir(tmp_path)
    assert (tmp_path / MARKER).is_file()


def test_a_non_empty_directory_without_the_marker_is_refused_untouched(tmp_path):
    _fill_like_a_run(tmp_path)
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    with pytest.raises(BadInput, match="not a demo output"):
        prepare_out_dir(tmp_path)
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before


@pytest.mark.e2e
def test_the_cli_refuses_with_one_line_and_exit_2(tmp_path):
    (tmp_path / "thesis.tex").write_text("years of work")
    done = subprocess.run(
        [sys.executable, "-m", "llmreplay.cli", "demo", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "not a demo output" in done.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["thesis.tex"]
