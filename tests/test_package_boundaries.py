"""The replayer's rooms and the doors between them, held to a table; the loop stays light.

The worker process must start fast and keep its event loop free: it imports neither pyarrow,
numpy nor a tokenizer. Planning, results and comparison may; the loop may read only the plan's
array columns and session rule.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from import_footprint import heavy_modules_loaded

ROOT = Path(__file__).resolve().parents[1]
REPLAYER = ROOT / "replayer"
PACKAGES = ("plan", "loop", "results", "judge", "measured", "compare", "report", "capacity")
HEAVY = ("numpy", "pyarrow", "tokenizers", "tiktoken", "mistral_common", "faker", "pandas")

# room -> the modules of other replayer rooms it may import ("plan.*": the whole room).
ALLOWED = {
    "loop": {"plan.arrays", "plan.sessions"},
    "plan": {"config", "loop.request_file", "loop.answer_echo", "loop.process_memory", "loop.http_pool"},
    "results": {"plan.*", "loop.*", "judge.*"},
    "judge": set(),  # gate limits, error gate, run fidelity, SLOs, statistics, verdict: below all who judge
    "measured": {"judge.*"},  # a run or trace read as measurements: below results, compare and capacity
    "compare": {"report.*", "judge.*", "measured.*", "results.server_series"},
    "report": set(),
    # a step is one side judged alone: it reads it through measured/, never through compare/
    "capacity": {"measured.*", "report.*", "judge.*", "results.server_series", "config", "coordinator"},
}
# room -> the composition root's modules it may import (capacity runs whole replays, like the CLI).
ROOT_DOORS = {"capacity": {"replayer.coordinator"}}


def _room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in PACKAGES else "(root)"


def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module in {f"replayer.{p}" for p in PACKAGES}:
                found.update(f"{node.module}.{alias.name}" for alias in node.names)
            else:
                found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name for name in found if name.startswith("replayer.")}


def _allowed(room: str, target: str) -> bool:
    inner = target.removeprefix("replayer.")
    rules = ALLOWED[room]
    return inner in rules or f"{inner.split('.')[0]}.*" in rules


def test_rooms_import_only_through_their_doors():
    crossings = []
    for room in PACKAGES:
        for path in sorted((REPLAYER / room).glob("*.py")):
            for target in sorted(_imports(path)):
                if _room(target) != room and not _allowed(room, target):
                    crossings.append(f"{path.relative_to(ROOT)} imports {target}")
    assert not crossings, "imports outside the table in this test:\n" + "\n".join(crossings)


def test_root_modules_are_not_imported_by_rooms_except_config():
    for room in PACKAGES:
        for path in sorted((REPLAYER / room).glob("*.py")):
            for target in _imports(path):
                if _room(target) == "(root)" and target not in (
                    "replayer",
                    "replayer.config",
                    *ROOT_DOORS.get(room, ()),
                ):
                    raise AssertionError(f"{path.relative_to(ROOT)} imports the composition root: {target}")


@pytest.mark.e2e
def test_the_loop_loads_no_heavy_module():
    modules = sorted(f"replayer.loop.{p.stem}" for p in (REPLAYER / "loop").glob("*.py") if p.stem != "__init__")
    loaded = heavy_modules_loaded(modules, HEAVY)
    assert loaded == [], f"the loop loaded {','.join(loaded)}"
