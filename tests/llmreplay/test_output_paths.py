"""The shared pieces of the bad-input rule: output paths, duration flags, key files."""

from __future__ import annotations

import os
import stat

import pytest

from llmreplay.durations import format_duration, parse_duration_ns
from llmreplay.errors import BadInput
from llmreplay.key_files import check_key_strength, create_key_file, read_key_file
from llmreplay.output_paths import atomic_output, check_output_dir, check_output_file, write_atomic


def test_atomic_output_appears_only_when_complete(tmp_path):
    out = tmp_path / "sub" / "out.txt"
    with pytest.raises(RuntimeError), atomic_output(out) as tmp:
        tmp.write_text("half")
        raise RuntimeError("the writer failed")
    assert not out.exists() and not list(tmp_path.rglob(".*tmp-*"))
    write_atomic(out, "whole")
    assert out.read_text() == "whole"
    with pytest.raises(BadInput, match="already exists"):
        write_atomic(out, "again")
    write_atomic(out, "again", force=True)
    assert out.read_text() == "again"


def test_special_targets_are_refused_not_replaced(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "real").write_text("keep")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    (tmp_path / "dir").mkdir()
    for name, message in (("fifo", "special file"), ("link", "symbolic link"), ("dir", "is a directory")):
        with pytest.raises(BadInput, match=message):
            check_output_file(tmp_path / name, force=True, flag="--x")
    assert stat.S_ISFIFO(os.lstat(tmp_path / "fifo").st_mode) and (tmp_path / "real").read_text() == "keep"


def test_a_target_that_changes_to_a_fifo_before_the_rename_is_kept(tmp_path):
    out = tmp_path / "out"
    with pytest.raises(BadInput, match="special file"), atomic_output(out) as tmp:
        tmp.write_text("data")
        os.mkfifo(out)  # appears while we write
    assert stat.S_ISFIFO(os.lstat(out).st_mode) and not list(tmp_path.glob(".*tmp-*"))


def test_directories_for_output(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(BadInput, match="is a file"):
        check_output_dir(tmp_path / "file")
    with pytest.raises(BadInput, match="file is a file, not a directory"):
        check_output_dir(tmp_path / "file" / "run")
    assert check_output_dir(tmp_path / "new" / "run") == tmp_path / "new" / "run"
    assert not (tmp_path / "new").exists()  # checked, not created


@pytest.mark.parametrize(
    ("text", "ns"),
    [("600s", 600 * 10**9), ("10m", 600 * 10**9), ("24h", 86_400 * 10**9), ("250ms", 250 * 10**6),
     ("1.5", 1_500_000_000), ("2d", 172_800 * 10**9), ("3us", 3000), (".5s", 500_000_000)],
)  # fmt: skip
def test_durations_one_spelling(text, ns):
    assert parse_duration_ns(text, "--x") == ns


@pytest.mark.parametrize(
    ("text", "message"),
    [("inf", "not a duration"), ("nan", "not a duration"), ("-1s", "must not be negative"),
     ("0s", "greater than zero"), ("200d", "too long"), ("5 parsecs", "not a duration"), ("", "not a duration")],
)  # fmt: skip
def test_durations_that_make_no_sense(text, message):
    with pytest.raises(BadInput, match=message):
        parse_duration_ns(text, "--x")


def test_duration_bounds_are_per_flag():
    assert parse_duration_ns("0s", "--x", allow_zero=True) == 0
    assert parse_duration_ns("-3ms", "--x", allow_negative=True) == -3_000_000
    with pytest.raises(BadInput, match="not a duration"):  # a unit is required
        parse_duration_ns("5", "--x", bare_unit=None)
    assert format_duration(600 * 10**9) == "10m" and format_duration(56 * 365 * 86_400 * 10**9) == "56 years"


def test_key_file_policy(tmp_path):
    key = tmp_path / "k"
    data = create_key_file(key)
    assert stat.S_IMODE(key.stat().st_mode) == 0o600 and len(data.strip()) == 64
    assert check_key_strength(read_key_file(key), key) == data
    with pytest.raises(BadInput, match="already exists"):
        create_key_file(key)
    key.chmod(0o640)
    with pytest.raises(BadInput, match="permissions 0640"):
        read_key_file(key)
    with pytest.raises(BadInput, match="need at least 64"):
        check_key_strength(b"ab" * 16, key)
    with pytest.raises(BadInput, match="need at least 32"):
        check_key_strength(b"\xff" * 31, key)
    assert check_key_strength(b"\xff" * 32, key) == b"\xff" * 32
    with pytest.raises(BadInput, match="not a regular file"):
        read_key_file(tmp_path)
