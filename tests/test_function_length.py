"""No function over 60 lines in the production packages (issue 28.6): a longer one is split into
helpers whose names say what they do, or named in ALLOWED with the reason it waits."""

from __future__ import annotations

import ast
import hashlib
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("llmreplay", "replayer", "recorder", "anonymizer")
MAX_LINES = 60  # a def's line to its body's last line (decorators not counted), as ast numbers them

# (path from the repository root, function name) -> why it is still longer. An entry goes once the
# function is split; a stale one fails too, so the table cannot outlive its reason.
ALLOWED: dict[tuple[str, str], str] = {}

# Parsing the packages (1.5 MB) takes about a second on the shared machine: a file's long functions
# are kept in pytest's cache under its content's hash, so only changed files are parsed again.
CACHE_KEY = f"function_length/py{sys.version_info[0]}{sys.version_info[1]}-max{MAX_LINES}"


def _defs(statements: list) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    """Every def among `statements` and the statements they hold: a def is only ever a statement,
    so expressions are not walked (ast.walk would take longer than the parse)."""
    for node in statements:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield node
        for field in ("body", "orelse", "finalbody", "handlers", "cases"):
            yield from _defs(getattr(node, field, ()))


def long_functions(source: bytes, filename: str = "<source>") -> list[tuple[int, str, int]]:
    """(line, name, length) of every function and method of `source` over MAX_LINES."""
    lengths = (
        (f.lineno, f.name, f.end_lineno - f.lineno + 1) for f in _defs(ast.parse(source, filename).body)
    )
    return [(line, name, length) for line, name, length in lengths if length > MAX_LINES]


def package_files() -> list[Path]:
    return [path for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))]


def test_no_function_is_over_60_lines_unless_allowed(request):
    cache = getattr(request.config, "cache", None)  # None under -p no:cacheprovider
    known = cache.get(CACHE_KEY, {}) if cache is not None else {}
    seen, too_long = {}, []
    for path in package_files():
        source = path.read_bytes()
        digest = hashlib.sha1(source).hexdigest()
        found = seen[digest] = known[digest] if digest in known else long_functions(source, str(path))
        too_long += [(path.relative_to(ROOT).as_posix(), line, name, n) for line, name, n in found]
    if cache is not None:
        cache.set(CACHE_KEY, seen)
    unexplained = [
        f"{p}:{line} {name} ({n} lines)" for p, line, name, n in too_long if (p, name) not in ALLOWED
    ]
    assert not unexplained, f"over {MAX_LINES} lines (split them, or allow with a reason):\n" + "\n".join(
        unexplained
    )
    stale = set(ALLOWED) - {(p, name) for p, _, name, _ in too_long}
    assert not stale, f"allowed but no longer over {MAX_LINES} lines (remove from ALLOWED): {sorted(stale)}"


def test_a_long_function_is_found_wherever_it_is_nested():
    body = "".join(f"                x{i} = {i}\n" for i in range(59))
    source = (
        "def short():\n    pass\n\n\n"
        "class C:\n    @property\n    async def method(self):\n        try:\n            pass\n"
        f"        except OSError:\n            def inner():\n{body}"
    )
    # inner: 60 lines (not over); method: its line 7 to the last, 64 lines
    assert long_functions(source.encode()) == [(7, "method", 64)]
