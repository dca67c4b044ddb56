"""`anonymize`'s flags come from AnonymizeConfig's fields, and building them loads no pipeline."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from anonymizer.cli import anonymize
from anonymizer.config import DEFAULT_NONCE_TOKENS, AnonymizeConfig
from llmreplay import options

ROOT = Path(__file__).resolve().parents[2]


def test_every_field_flag_is_on_the_command_with_its_default():
    shown = " ".join(CliRunner().invoke(anonymize, ["--help"], terminal_width=200).output.split())
    for item in options.declared(AnonymizeConfig):
        assert item.flag in shown
    assert f"at least 1. [default: {DEFAULT_NONCE_TOKENS}]" in shown
    assert "[default: preserve]" in shown


@pytest.mark.e2e  # a fresh interpreter is the only clean sys.modules
def test_the_command_loads_neither_the_pipeline_nor_pyarrow():
    code = "import sys, anonymizer.cli\nprint([m for m in ('anonymizer.pipeline', 'pyarrow') if m in sys.modules])"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
