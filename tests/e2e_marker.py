"""The `e2e` marker's guard: a test (or its fixtures) that starts a process without the marker fails,
so `pytest -m "not e2e"` stays in one process. A plugin of tests/conftest.py."""

from __future__ import annotations

import platform
import resource
import sys

import pytest

PROCESS_MARKERS = ("e2e", "engines")  # engines: tests/engines' own marker for real engines
SPAWN_EVENTS = frozenset(
    {"subprocess.Popen", "os.fork", "os.forkpty", "os.posix_spawn", "os.spawn", "os.system", "os.exec"}
)
_spawns = [0]


def _count_spawns(event: str, _args) -> None:
    if event in SPAWN_EVENTS:
        _spawns[0] += 1


sys.addaudithook(_count_spawns)  # once per interpreter: an audit hook cannot be removed
# platform.processor() runs `uname -p` once per process, the first time anyone asks (the openai SDK
# does, for its headers): asked here, so it is not a process of whichever test asks first.
platform.processor()


def processes_started() -> tuple[int, int]:
    """Spawns audited so far, and the page faults of reaped children: multiprocessing's spawn goes
    through _posixsubprocess unaudited, but every child that has ended and been waited for adds faults."""
    return _spawns[0], resource.getrusage(resource.RUSAGE_CHILDREN).ru_minflt


def _check(item: pytest.Item, before: tuple[int, int], phase: str) -> None:
    if processes_started() != before and not any(item.get_closest_marker(m) for m in PROCESS_MARKERS):
        pytest.fail(
            f"{item.nodeid} starts a process in its {phase} but is not marked e2e: add "
            "`pytestmark = pytest.mark.e2e` to its module (or @pytest.mark.e2e to the test)",
            pytrace=False,
        )


def _guarded(item: pytest.Item, phase: str):
    before = processes_started()
    result = yield
    _check(item, before, phase)
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item):
    return (yield from _guarded(item, "fixtures"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    return (yield from _guarded(item, "body"))
