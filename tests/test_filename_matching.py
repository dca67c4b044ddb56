"""Tests found by path (mitmproxy's test/filename_matching.py): production module a/b/c.py is tested in
tests/a/b/test_c.py, and tests/a/b/test_c.py tests a/b/c.py, unless tests/mirror_exceptions.py says why.
tests/e2e (by topic) and tests/engines (real engines, not packages: their modules import siblings by
top-level name) are left out of the second rule."""

from __future__ import annotations

import importlib
import re
from pathlib import Path, PurePosixPath

from mirror_exceptions import UNMIRRORED_MODULES, UNMIRRORED_TESTS

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("llmreplay", "recorder", "anonymizer", "replayer")
BY_TOPIC = ("tests/e2e", "tests/engines")
UNPACKAGED = ("tests/data", "tests/engines")


def production_modules(root: Path) -> set[str]:
    """Every module of the packages but __init__.py, as a posix path from the root."""
    return {
        p.relative_to(root).as_posix()
        for package in PACKAGES
        for p in (root / package).rglob("*.py")
        if p.name != "__init__.py"
    }


def suite_files(root: Path) -> set[str]:
    """Every tests/**/test_*.py, as a posix path from the root."""
    return {p.relative_to(root).as_posix() for p in (root / "tests").rglob("test_*.py")}


def mirror_test(module: str) -> str:
    path = PurePosixPath(module)
    return str(PurePosixPath("tests", path.parent, f"test_{path.name}"))


def module_under_test(test_file: str) -> str:
    path = PurePosixPath(test_file)
    return str(PurePosixPath(*path.parts[1:-1], path.name.removeprefix("test_")))


def modules_without_tests(modules: set[str], tests: set[str], listed: dict[str, str]) -> list[str]:
    return sorted(m for m in modules if mirror_test(m) not in tests and m not in listed)


def orphan_tests(modules: set[str], tests: set[str], listed: dict[str, str]) -> list[str]:
    by_module = {t for t in tests if not t.startswith(tuple(f"{folder}/" for folder in BY_TOPIC))}
    return sorted(t for t in by_module if module_under_test(t) not in modules and t not in listed)


def stale_entries(modules: set[str], tests: set[str]) -> list[str]:
    """Listed modules that are gone or now have their test file; listed tests that are gone or now name one."""
    modules_stale = [m for m in UNMIRRORED_MODULES if m not in modules or mirror_test(m) in tests]
    tests_stale = [t for t in UNMIRRORED_TESTS if t not in tests or module_under_test(t) in modules]
    return modules_stale + tests_stale


def test_every_module_has_its_test_file_or_a_reason():
    missing = modules_without_tests(production_modules(ROOT), suite_files(ROOT), UNMIRRORED_MODULES)
    assert missing == [], "add tests/<folder>/test_<name>.py, or a reason in tests/mirror_exceptions.py"


def test_every_test_file_names_its_module_or_has_a_reason():
    orphans = orphan_tests(production_modules(ROOT), suite_files(ROOT), UNMIRRORED_TESTS)
    assert orphans == [], "name the file after its module, or give a reason in tests/mirror_exceptions.py"


def test_no_reason_outlives_its_cause():
    assert stale_entries(production_modules(ROOT), suite_files(ROOT)) == []


def test_the_test_files_a_reason_cites_exist():
    reasons = [*UNMIRRORED_MODULES.values(), *UNMIRRORED_TESTS.values()]
    cited = {path for reason in reasons for path in re.findall(r"tests/[\w/]+\.py", reason)}
    assert sorted(path for path in cited if not (ROOT / path).is_file()) == []


def test_every_test_folder_is_a_package():
    folders = {p.parent for p in (ROOT / "tests").rglob("*.py")}
    unpackaged = [ROOT / folder for folder in UNPACKAGED]
    missing = [f for f in folders if not (f / "__init__.py").is_file() and f not in unpackaged]
    assert sorted(missing) == []


def test_the_packages_imported_are_the_production_ones():
    """tests/ is on sys.path for the shared helpers and tests/replayer is a package too: the root comes first."""
    imported = [Path(importlib.import_module(package).__file__).parent for package in PACKAGES]
    assert imported == [ROOT / package for package in PACKAGES]


def test_a_module_added_without_a_test_file_or_a_reason_fails():
    modules = {"replayer/plan/schedule.py", "replayer/plan/new_thing.py", "replayer/plan/listed.py"}
    tests = {"tests/replayer/plan/test_schedule.py"}
    listed = {"replayer/plan/listed.py": "a table only"}
    assert modules_without_tests(modules, tests, listed) == ["replayer/plan/new_thing.py"]


def test_a_test_file_that_names_no_module_fails_unless_by_topic_or_listed():
    modules = {"replayer/plan/schedule.py"}
    tests = {
        "tests/replayer/plan/test_schedule.py",
        "tests/replayer/plan/test_schedule_more.py",
        "tests/replayer/plan/test_listed.py",
        "tests/e2e/replay/test_timing.py",
        "tests/engines/test_engine_smoke.py",
    }
    listed = {"tests/replayer/plan/test_listed.py": "a check of the code as a whole"}
    assert orphan_tests(modules, tests, listed) == ["tests/replayer/plan/test_schedule_more.py"]
