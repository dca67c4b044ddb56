"""Hostile edges (issue 26): flags, files and refusals of replay, barrier, capacity and k8s-job.

Each through the real CLI: one line on stderr, exit status 2, no traceback, no silent wait, and nothing
written (or what was written removed) when the replay is refused. docs/bad-input.md lists the answers.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from bad_input import assert_refused, refused
from live_processes import ROOT, free_port, llmreplay_cmd, wait_http_ok
from replay_helpers import content_record, replay_cmd, write_content_trace

from llmreplay.errors import BadInput
from replayer.config import parse_headers, parse_shard, parse_start_at
from replayer.coordinator import PARTS_DIR, _claim, refuse_used_run_dir

NO_SERVER = "http://127.0.0.1:9"  # refused before any request is sent


@pytest.fixture
def trace(tmp_path) -> Path:
    return write_content_trace(tmp_path / "t.parquet", [content_record(i, i * 100.0) for i in range(4)])


def replay_refused(trace: Path, out: Path, *args: str, target: str = NO_SERVER, expected=()) -> str:
    done = subprocess.run(replay_cmd(trace, target, out, *args), capture_output=True, text=True, timeout=90)
    line = assert_refused(done, *expected)
    assert not out.exists(), f"a refused replay wrote {sorted(out.rglob('*'))}"
    return line


# -- A: tracebacks and silent waits ------------------------------------------------------------------
CASES = {
    "tiny speed": (
        ["--speed", "1e-300"],
        "--speed 1e-300: the schedule would span more than a billion years",
    ),
    "limit past int64": (["--limit", "99999999999999999999"], "Invalid value for '--limit'"),
    "seed past int64": (["--seed", "99999999999999999999"], "Invalid value for '--seed'"),
    "negative seed": (["--seed", "-1"], "Invalid value for '--seed'"),
    "workers past int64": (["--workers", "99999999999999999999"], "Invalid value for '--workers'"),
    "huge shard count": (["--shard", "0/99999999999999999999"], "at most 1,000 hosts"),
    "start at 1e300": (["--start-at", "1e300"], "--start-at '1e300': past the year 5000"),
    "start at nan": (["--start-at", "nan"], "--start-at 'nan': not a number of unix seconds"),
    "start in 3112 years": (
        ["--start-at", "99999999999"],
        "from now; a shared start must be within 24 hours",
    ),
    "start in 2999": (["--start-at", "2999-01-01T00:00:00Z"], "a shared start must be within 24 hours"),
    "start long ago": (["--start-at", "1"], "years ago; a shared start must lie ahead"),
}


@pytest.mark.e2e
@pytest.mark.parametrize("case", sorted(CASES))
def test_replay_flags_out_of_reach_are_one_line(trace, tmp_path, case):
    args, expected = CASES[case]
    replay_refused(trace, tmp_path / "run", *args, expected=(expected,))


@pytest.mark.e2e
def test_a_start_a_few_seconds_ahead_is_taken():
    soon = time.time_ns() + 5_000_000_000
    assert parse_start_at(f"{soon / 1e9:.3f}", "--start-at") == pytest.approx(soon, abs=1_000_000)
    with pytest.raises(BadInput, match="within 24 hours"):
        parse_start_at(f"{time.time() + 25 * 3600:.0f}", "--start-at")


def test_shard_counts_are_bounded():
    assert parse_shard("999/1000", "--shard") == (999, 1000)
    with pytest.raises(BadInput, match="at most 1,000 hosts"):
        parse_shard("0/1001", "--shard")


@pytest.mark.e2e
def test_float_flags_must_be_finite():
    refused("sim", "--spike-ms", "nan", expected=("--spike-ms nan: must be a finite number",))


@pytest.mark.e2e
def test_barrier_port_out_of_range_is_one_line():
    refused("barrier", "--shards", "2", "--port", "70000", expected=("Invalid value for '--port'", "65535"))


@pytest.mark.e2e
def test_capacity_into_an_unwritable_directory_is_refused_before_any_step(trace):
    refused("capacity", str(trace), "--target", NO_SERVER, "-o", "/sys/llmreplay-capacity",
            "--slo", "ttft_p95<=500ms", expected=("-o /sys/llmreplay-capacity: cannot write in /sys",))  # fmt: skip


@pytest.mark.e2e
def test_compare_html_of_a_run_without_one_successful_request(tmp_path, start_sim):
    """A run whose every request failed still compares, and its HTML report is written (no traceback)."""
    trace = write_content_trace(tmp_path / "t.parquet", [content_record(i, i * 50.0) for i in range(6)])
    url = start_sim("--profile", "fast", "--error-rate", "1")
    run = tmp_path / "run"
    done = subprocess.run(replay_cmd(trace, url, run), capture_output=True, text=True, timeout=90)
    assert done.returncode == 1 and "no successful request" in done.stdout + done.stderr, done.stderr
    for sides in ([trace, run], [run, trace], [run, run]):
        html = tmp_path / "c.html"
        html.unlink(missing_ok=True)
        cmd = llmreplay_cmd("compare", *map(str, sides), "--html", str(html))
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=90, cwd=ROOT)
        assert "Traceback" not in done.stderr and done.returncode in (1, 2), done.stderr
        assert html.is_file() or len(done.stderr.splitlines()) == 1


# -- B: request bodies private, refusals leave nothing ---------------------------------------------
def test_parts_are_private_and_a_released_claim_leaves_nothing(tmp_path):
    run = tmp_path / "a" / "b" / "run"
    claim = _claim(run)
    assert (claim.parts.stat().st_mode & 0o777) == 0o700
    (claim.parts / "requests-0.bin").write_bytes(b"body")
    claim.release()
    assert not (tmp_path / "a").exists()
    refuse_used_run_dir(run)  # the next replay into it is not refused
    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / "note").write_text("mine")
    _claim(kept).release()
    assert sorted(p.name for p in kept.iterdir()) == ["note"]


def test_request_files_are_0600(tmp_path):
    from replayer.loop.request_file import RequestFileWriter

    writer = RequestFileWriter(tmp_path / "requests-0.bin", tmp_path / "requests-0.fields")
    writer.add("/v1/chat/completions", [], b"{}", True, None, "m")
    writer.close()
    for name in ("requests-0.bin", "requests-0.fields"):
        assert ((tmp_path / name).stat().st_mode & 0o777) == 0o600, name


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("x-a: b\r\nx-evil: 1", "--header 'x-a': the value holds a carriage return (CR)"),
        ("x-a: b\nx-evil: 1", "the value holds a line feed (LF)"),
        ("x a: b", "a header name cannot hold spaces"),
        ("x-a: \u2603", "not Latin-1"),
    ],
)
def test_headers_that_would_split_the_request_are_refused_at_the_flag(header, expected):
    with pytest.raises(BadInput, match="^" + "--header") as refusal:
        parse_headers((header,), "--header")
    assert expected in str(refusal.value) and "\n" not in str(refusal.value)


@pytest.mark.e2e
def test_refused_replays_leave_no_parts_behind(trace, tmp_path, shared_sim):
    out = tmp_path / "run"
    replay_refused(trace, out, "--header", "x-a: b\r\nx-evil: 1", target=shared_sim,
                   expected=("--header 'x-a': the value holds a carriage return",))  # fmt: skip
    replay_refused(trace, out, "--start-at", "1", target=shared_sim, expected=("ago",))
    port = free_port()
    replay_refused(trace, out, "--start-barrier", f"http://127.0.0.1:{port}", target=shared_sim,
                   expected=(f"--start-barrier http://127.0.0.1:{port}: cannot reach it",))  # fmt: skip
    # a barrier that answers but refuses this shard: refused after .parts/ was made, which goes again
    barrier = subprocess.Popen(llmreplay_cmd("barrier", "--shards", "3", "--port", str(port)), cwd=ROOT,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        wait_http_ok(f"http://127.0.0.1:{port}/time", proc=barrier)
        replay_refused(trace, out, "--shard", "0/2", "--start-barrier", f"http://127.0.0.1:{port}",
                       target=shared_sim, expected=("refused shard 0/2", "waits for 3 shards"))  # fmt: skip
    finally:
        barrier.kill()
        barrier.wait()
    done = subprocess.run(replay_cmd(trace, shared_sim, out, "--speed", "10"), capture_output=True, text=True,
                          timeout=90)  # fmt: skip
    assert done.returncode in (0, 1), done.stderr  # the next replay into the same -o is not refused
    assert not (out / PARTS_DIR).exists() and (out / "run.json").is_file()


@pytest.mark.e2e
def test_request_bodies_are_private_while_a_replay_waits(trace, tmp_path, shared_sim):
    out = tmp_path / "run"
    start = f"{time.time() + 8:.3f}"
    proc = subprocess.Popen(replay_cmd(trace, shared_sim, out, "--start-at", start), cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while not list((out / PARTS_DIR).glob("requests-*.fields")) and time.monotonic() < deadline:
            assert proc.poll() is None, proc.stderr.read()
            time.sleep(0.05)
        parts = out / PARTS_DIR
        assert (parts.stat().st_mode & 0o777) == 0o700
        files = [p for p in parts.iterdir() if p.name.startswith("requests-")]
        assert files and all((p.stat().st_mode & 0o777) == 0o600 for p in files), files
    finally:
        proc.wait(timeout=60)
    assert proc.returncode in (0, 1), proc.stderr.read()


# -- C: sim --log, traces that are not files ----------------------------------------------------------
@pytest.mark.e2e
def test_sim_log_through_a_link_is_refused_at_start_naming_log(tmp_path):
    real = tmp_path / "real.parquet"
    for name in ("log.parquet", "s.steps.parquet"):
        (tmp_path / name).symlink_to(real)
    for log in ("log.parquet", "s.parquet"):  # the link at the log, or at its steps log
        line = refused("sim", "--port", str(free_port()), "--log", str(tmp_path / log), timeout_s=30)
        assert line.startswith("llmreplay: error: --log ") and "is a symbolic link" in line, line
    assert not real.exists() and not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]


@pytest.mark.e2e
@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_trace_that_is_not_a_regular_file_says_so(tmp_path, kind):
    import os

    path = Path("/dev/zero")
    if kind == "fifo":
        path = tmp_path / "trace.parquet"
        os.mkfifo(path)
    for args in (
        ["inspect", str(path)],
        ["replay", str(path), "--target", NO_SERVER, "-o", str(tmp_path / "r")],
    ):
        refused(*args, expected=(f"{path}: not a regular file (a FIFO, device or socket)",), timeout_s=30)
