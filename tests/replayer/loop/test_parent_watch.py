"""replayer.loop.parent_watch: how a worker knows its coordinator is gone (the kill -9 tests run it all)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
from replay_helpers import ROOT

from replayer.loop.parent_watch import PDEATHSIG_ENV, parent_gone


def test_the_liveness_pipe_turns_readable_when_its_writer_is_gone():
    read_fd, write_fd = os.pipe()
    try:
        assert not parent_gone(os.getppid(), read_fd)
        assert parent_gone(os.getppid() + 1_000_000, read_fd)  # re-parented: the parent is gone
        os.close(write_fd)
        assert parent_gone(os.getppid(), read_fd)
    finally:
        os.close(read_fd)


@pytest.mark.e2e
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux only")
@pytest.mark.parametrize(("setting", "expected"), [(None, signal.SIGKILL), ("0", 0)])
def test_the_parent_death_signal_is_sigkill_unless_switched_off(setting, expected):
    probe = (
        "import ctypes; from replayer.loop.parent_watch import die_with_parent; die_with_parent(); "
        "libc = ctypes.CDLL(None); value = ctypes.c_int(-1); libc.prctl(2, ctypes.byref(value)); "
        "print(value.value)"
    )  # 2: PR_GET_PDEATHSIG
    env = {k: v for k, v in os.environ.items() if k != PDEATHSIG_ENV}
    if setting is not None:
        env[PDEATHSIG_ENV] = setting
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, env=env, capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) == expected
