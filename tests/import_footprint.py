"""What importing some modules loads into a fresh interpreter: the check behind each process's light-import rule."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("numpy", "pyarrow", "tokenizers", "tiktoken", "mistral_common", "faker", "pandas")


def heavy_modules_loaded(modules: Iterable[str], heavy: Iterable[str] = HEAVY) -> list[str]:
    """The `heavy` modules a fresh interpreter holds after importing `modules` (a subprocess: about a second)."""
    code = (
        "import sys\n"
        + "".join(f"import {module}\n" for module in modules)
        + f"print(','.join(sorted(m for m in {tuple(heavy)!r} if m in sys.modules)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=30, check=True
    )
    return [name for name in done.stdout.strip().split(",") if name]
