"""A signal while the workers load: the workers it stops close their pipes mid-load, and the coordinator
reads that as the interrupt (a run with stop_reason interrupted), never as a worker's failure."""

from __future__ import annotations

import multiprocessing

import pytest

from replayer.worker_processes import _await_ready, _last_word


class _Stopped:
    """The parts of replayer.worker_processes._Workers that _await_ready reads, one worker already gone."""

    def __init__(self, interrupted: bool):
        context = multiprocessing.get_context("spawn")
        self.pipes, child = [], None
        parent, child = context.Pipe()
        child.close()  # the worker exited mid-load: its end is closed, nothing sent
        self.pipes.append(parent)
        self.procs = [context.Process(target=print, name="llmreplay-worker-0")]  # never started: not alive
        self.interrupted = interrupted


def test_a_closed_pipe_has_no_last_word():
    parent, child = multiprocessing.Pipe()
    child.close()
    assert _last_word(parent) is None


def test_a_waiting_report_is_the_last_word():
    parent, child = multiprocessing.Pipe()
    child.send(("done", {"stop_reason": "completed"}))
    child.close()
    assert _last_word(parent) == ("done", {"stop_reason": "completed"})


def test_loading_stops_quietly_once_interrupted():
    assert _await_ready(_Stopped(interrupted=True)) == 0.0


def test_a_worker_gone_without_an_interrupt_is_a_failure():
    with pytest.raises(RuntimeError, match="worker llmreplay-worker-0"):
        _await_ready(_Stopped(interrupted=False))
