"""The proxy side of the recorder stays light: the mitmproxy process loads no pyarrow, numpy or tokenizer.

They belong to the converter process (spawned, so it does not share the proxy's modules).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e  # a fresh interpreter is the only clean sys.modules (about a second)
ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("pyarrow", "numpy", "tokenizers", "tiktoken", "mistral_common")
# What `llmreplay record` imports in the process that runs mitmproxy: the CLI, the embedded master
# (with the mitmproxy addons it builds) and the recorder addon with everything it imports.
PROXY_MODULES = (
    "llmreplay.cli",
    "recorder.cli",
    "recorder.embedded",
    "recorder.addon",
    "mitmproxy.master",
    "mitmproxy.addons.proxyserver",
)


def test_the_proxy_process_loads_no_heavy_module():
    code = (
        "import sys\n"
        + "".join(f"import {module}\n" for module in PROXY_MODULES)
        + f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=30, check=True
    )
    assert done.stdout.strip() == "", f"the mitmproxy process loads {done.stdout.strip()}"
