"""Bad flags of `llmreplay capacity`: one line, exit 2, before anything is sent."""

import subprocess
import sys

import pytest

CASES = [
    (["--precision", "0"], "--precision"),
    (["--headroom-target", "1.5"], "--headroom-target"),
    (["--start-factor", "-1"], "--start-factor"),
    (["--slo", "ttft<=5"], "--slo"),
    (["--window", "soon"], "--window"),
    (["--gpus", "0"], "--gpus"),
    (["--start-factor", "128"], "--start-factor 128: above --max-factor"),
]


@pytest.mark.e2e
@pytest.mark.parametrize(("flags", "named"), CASES)
def test_bad_flag_is_one_line_exit_2(tmp_path, flags, named):
    trace = tmp_path / "missing.parquet"
    cmd = [
        sys.executable,
        "-m",
        "llmreplay.cli",
        "capacity",
        str(trace),
        "--target",
        "http://127.0.0.1:9",
        "-o",
        str(tmp_path / "o"),
        *flags,
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and named in lines[0] and "Traceback" not in done.stderr
