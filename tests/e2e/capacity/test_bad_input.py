"""Bad flags of `llmreplay capacity`: one line, exit 2, before anything is sent."""

import subprocess

import pytest
from capacity_support import capacity_cmd

CASES = [
    (["--precision", "0"], "--precision"),
    (["--headroom-target", "1.5"], "--headroom-target"),
    (["--start-factor", "-1"], "--start-factor"),
    (["--slo", "ttft<=5"], "--slo"),
    (["--window", "soon"], "--window"),
    (["--gpus", "0"], "--gpus"),
    (["--max-steps", "0"], "--max-steps"),
    (["--start-factor", "128"], "--start-factor 128: above --max-factor"),
]


@pytest.mark.e2e
@pytest.mark.parametrize(("flags", "named"), CASES)
def test_bad_flag_is_one_line_exit_2(tmp_path, flags, named):
    cmd = capacity_cmd(tmp_path / "missing.parquet", "http://127.0.0.1:9", tmp_path / "o", *flags)
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and named in lines[0] and "Traceback" not in done.stderr
