"""Every test tests/long_runs.py names exists: a renamed test would otherwise run in `make test` again."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from long_runs import LONG

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("nodeid", sorted(LONG))
def test_a_long_run_names_a_test_that_exists(nodeid):
    path, _, name = nodeid.partition("::")
    function = re.sub(r"\[.*\]$", "", name)
    assert re.search(rf"^def {re.escape(function)}\(", (ROOT / path).read_text(), re.MULTILINE), nodeid
