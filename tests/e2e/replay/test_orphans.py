"""No load without a living replay: `kill -9` of the coordinator (a CI timeout, the OOM killer,
`docker kill`) stops its workers within a second, mid-run, parked before a long idle gap, or still
starting; and the dead run's directory is refused by the next replay.

Both mechanisms are exercised: the Linux parent-death signal (the default), and the portable
liveness pipe alone (LLMREPLAY_WORKER_PDEATHSIG=0, as where there is no prctl). The sim's
ground-truth log says when each request arrived (its monotonic clock is the test's)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest
from replay_helpers import ROOT, content_record, replay_cmd, run_replay, write_content_trace

from replayer.loop.parent_watch import PDEATHSIG_ENV

pytestmark = pytest.mark.e2e  # every test here starts processes

LATE_NS = 1_000_000_000  # nothing may reach the target later than this after the kill
GONE_S = 2.0  # every worker process is gone within this after the kill
MECHANISMS = {"pdeathsig": {}, "pipe-only": {PDEATHSIG_ENV: "0"}}
ERR_NAME = "replay.stderr"
ORPHAN_LINE = "the replay coordinator (pid {pid}) is gone; stopped sending and exited"


def _start(trace: Path, url: str, out: Path, env: dict, *args: str) -> subprocess.Popen:
    """The replay, its stderr (and its workers') in ERR_NAME next to the run directory."""
    cmd = replay_cmd(trace, url, out, "--engine", "vllm", "--workers", "2", *args)
    with open(out.parent / ERR_NAME, "wb") as err:
        return subprocess.Popen(
            cmd, cwd=ROOT, env={**os.environ, **env}, stdout=subprocess.DEVNULL, stderr=err
        )


def _stderr(out: Path) -> str:
    return (out.parent / ERR_NAME).read_text(errors="replace")


def _workers(coordinator: subprocess.Popen) -> list[psutil.Process]:
    procs = []
    for child in psutil.Process(coordinator.pid).children(recursive=True):
        try:
            if any("spawn_main" in part for part in child.cmdline()):
                procs.append(child)
        except psutil.NoSuchProcess:
            pass
    return procs


def _alive(proc: psutil.Process) -> bool:
    try:  # re-parented orphans may linger as zombies where pid 1 does not reap: dead all the same
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _wait_until(predicate, timeout_s: float, step_s: float = 0.01) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step_s)
    return predicate()


def _kill_and_watch(coordinator: subprocess.Popen, workers: list[psutil.Process]) -> tuple[int, float]:
    """SIGKILL the coordinator; returns when (perf_counter_ns) and how many seconds until no worker lived."""
    killed_ns = time.perf_counter_ns()
    os.kill(coordinator.pid, signal.SIGKILL)
    coordinator.wait(10)
    _wait_until(lambda: not any(_alive(w) for w in workers), 10)
    return killed_ns, (time.perf_counter_ns() - killed_ns) / 1e9


def _wait_running(out: Path, coordinator: subprocess.Popen, workers: int = 2) -> None:
    """Until every worker has its clock (its results spool exists); offset 0 is 0.5 s later."""
    spools = [out / ".parts" / f".results-{w}.marshal.partial" for w in range(workers)]
    assert _wait_until(lambda: all(p.exists() for p in spools) or coordinator.poll() is not None, 60)
    assert coordinator.poll() is None, _stderr(out)[-2000:]


def _refused_as_dead(trace: Path, url: str, out: Path) -> None:
    again = run_replay(trace, url, out, "--engine", "vllm")
    assert again.returncode == 2 and again.stderr.strip().count("\n") == 0, again.stderr
    assert str(out) in again.stderr and ".parts/" in again.stderr and "killed" in again.stderr


@pytest.fixture
def killed():
    """Everything a test started or found: coordinators and their workers. Whatever is still alive
    at teardown (an assertion failed) is killed, so no orphan outlives the test."""
    procs: list[subprocess.Popen | psutil.Process] = []
    yield procs
    for proc in procs:
        if isinstance(proc, subprocess.Popen):
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
        elif _alive(proc):
            proc.kill()


@pytest.mark.parametrize("mechanism", list(MECHANISMS))
def test_kill_9_mid_run_stops_every_worker_within_a_second(tmp_path, sim_with_truth, killed, mechanism):
    records = [content_record(i, i * 25.0, completion_tokens=30) for i in range(800)]  # 40/s for 20 s
    trace = write_content_trace(tmp_path / "t.parquet", records)
    url, truth = sim_with_truth("--profile", "fast")
    out = tmp_path / "run"
    coordinator = _start(trace, url, out, MECHANISMS[mechanism])
    killed.append(coordinator)
    _wait_running(out, coordinator)
    time.sleep(2.0)  # 1.5 s of sending
    workers = _workers(coordinator)
    killed.extend(workers)
    assert len(workers) == 2
    killed_ns, gone_s = _kill_and_watch(coordinator, workers)
    assert gone_s < GONE_S, f"workers alive {gone_s:.2f} s after the kill"
    time.sleep(1.5)  # anything still to come would arrive now
    arrivals = [row["arrival_mono_ns"] for row in truth().values()]
    assert len(arrivals) > 30  # it was sending
    last_after_kill_ns = max(arrivals) - killed_ns
    assert last_after_kill_ns < LATE_NS, (
        f"a request reached the sim {last_after_kill_ns / 1e9:.3f} s after the kill"
    )
    assert len(arrivals) < 400  # and the schedule had far more to send
    if mechanism == "pipe-only":  # each worker said why it stopped (SIGKILL leaves no word)
        assert _stderr(out).count(ORPHAN_LINE.format(pid=coordinator.pid)) == 2, _stderr(out)[-2000:]
    assert "Traceback" not in _stderr(out)
    _refused_as_dead(trace, url, out)


@pytest.mark.parametrize("mechanism", list(MECHANISMS))
def test_kill_9_while_parked_before_a_long_idle_gap(tmp_path, sim_with_truth, killed, mechanism):
    # a burst, then 10 minutes of nothing: the workers sit in their timers, not in a read
    records = [content_record(i, i * 50.0, completion_tokens=4) for i in range(6)]
    records += [content_record(6 + i, 600_000.0 + i * 50.0, completion_tokens=4) for i in range(6)]
    trace = write_content_trace(tmp_path / "t.parquet", records)
    url, truth = sim_with_truth("--profile", "fast")
    out = tmp_path / "run"
    coordinator = _start(trace, url, out, MECHANISMS[mechanism])
    killed.append(coordinator)
    _wait_running(out, coordinator)
    time.sleep(1.5)  # the burst is over: both workers are parked before the gap
    workers = _workers(coordinator)
    killed.extend(workers)
    assert len(workers) == 2
    killed_ns, gone_s = _kill_and_watch(coordinator, workers)
    assert gone_s < GONE_S, f"parked workers alive {gone_s:.2f} s after the kill"
    at_sim = truth()
    assert sorted(at_sim) == sorted(f"r{i}" for i in range(6))
    assert all(row["arrival_mono_ns"] < killed_ns for row in at_sim.values())
    if mechanism == "pipe-only":  # the EOF woke both parked loops
        assert _stderr(out).count(ORPHAN_LINE.format(pid=coordinator.pid)) == 2, _stderr(out)[-2000:]


def test_kill_9_while_the_workers_start_sends_nothing(tmp_path, sim_with_truth, killed):
    """Killed before the clock starts: a worker still importing finds its parent gone (or its pipe
    closed) and exits without sending one request."""
    trace = write_content_trace(tmp_path / "t.parquet", [content_record(i, i * 10.0) for i in range(50)])
    url, truth = sim_with_truth("--profile", "fast")
    out = tmp_path / "run"
    coordinator = _start(trace, url, out, {})
    killed.append(coordinator)
    assert _wait_until(lambda: _workers(coordinator) or coordinator.poll() is not None, 60, step_s=0.005)
    workers = _workers(coordinator)
    killed.extend(workers)
    assert workers, _stderr(out)[-2000:]
    _, gone_s = _kill_and_watch(coordinator, workers)
    assert gone_s < GONE_S, f"starting workers alive {gone_s:.2f} s after the kill"
    time.sleep(1.0)
    assert truth() == {}
    # a worker that finds its parent gone just leaves (one killed while multiprocessing was still
    # handing it its arguments dies in the standard library, before any of our code: EOFError there)
    assert "/replayer/" not in _stderr(out), _stderr(out)[-2000:]
    assert not (out / ".parts" / ".results-0.marshal.partial").exists()  # no worker got to its clock
