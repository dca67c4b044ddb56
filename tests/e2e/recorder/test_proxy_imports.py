"""The proxy side of the recorder stays light: the mitmproxy process loads no pyarrow, numpy or tokenizer.

They belong to the converter process (spawned, so it does not share the proxy's modules).
"""

from __future__ import annotations

import pytest
from import_footprint import heavy_modules_loaded

pytestmark = pytest.mark.e2e  # a fresh interpreter is the only clean sys.modules (about a second)
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
    loaded = heavy_modules_loaded(PROXY_MODULES, HEAVY)
    assert loaded == [], f"the mitmproxy process loads {', '.join(loaded)}"
