"""The e2e guard (tests/e2e_marker.py) on a suite of its own: a test or fixture that starts a process
without the marker fails, whether by subprocess or by a multiprocessing child; in-process tests pass."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.e2e  # the inner tests start processes

SUITE = """
import multiprocessing
import os
import subprocess
import sys

import pytest


def test_unmarked_subprocess():
    subprocess.run([sys.executable, "-c", "pass"], check=True)


@pytest.mark.e2e
def test_marked_subprocess():
    subprocess.run([sys.executable, "-c", "pass"], check=True)


def test_in_process():
    assert sum([1, 2]) == 3


@pytest.fixture
def spawned_child():
    child = multiprocessing.get_context("spawn").Process(target=os.getpid)
    child.start()
    child.join()
    return child.exitcode


def test_unmarked_multiprocessing_child_in_a_fixture(spawned_child):
    assert spawned_child == 0
"""


def test_a_process_started_without_the_marker_fails_its_test(pytester):
    pytester.makeconftest('pytest_plugins = ["e2e_marker"]')
    pytester.makeini("[pytest]\nmarkers =\n    e2e: starts a process\n")
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, failed=1, errors=1)
    result.stdout.fnmatch_lines_random(
        [
            "*::test_unmarked_subprocess starts a process in its body but is not marked e2e*",
            "*::test_unmarked_multiprocessing_child_in_a_fixture starts a process in its fixtures*",
        ]
    )
