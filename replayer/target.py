"""The target engine: base URL normalisation, model list and engine detection (before the run).

Blocking HTTP is fine here: it runs once, before any clock starts.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass

from llmreplay.errors import BadInput

# `owned_by` of /v1/models, or the Server header, names the engine. `llmreplay sim` accepts vLLM's
# length-forcing extensions (ignore_eos, min_tokens), so it is driven like vLLM.
_ENGINE_MARKERS = (
    ("vllm", "vllm"),
    ("llmreplay-sim", "vllm"),
    ("sglang", "sglang"),
    ("tensorrt", "trtllm"),
    ("trtllm", "trtllm"),
)


@dataclass(frozen=True, slots=True)
class TargetInfo:
    base_url: str
    models: tuple[str, ...]
    engine: str  # vllm | sglang | trtllm | openai
    detected_from: str  # "flag" | "owned_by" | "server header" | "default"


def normalise_base_url(url: str) -> str:
    """`http://h:p`, `http://h:p/` and `http://h:p/v1` all mean the same server root."""
    parsed = urllib.parse.urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise BadInput(f"--target {url}: expected an http:// or https:// URL")
    path = parsed.path.rstrip("/")
    if path.endswith("/v1"):
        path = path[: -len("/v1")]
    return f"{parsed.scheme}://{parsed.netloc}{path}"


def probe_target(base_url: str, engine: str, api_key: str | None, timeout_s: float = 10.0) -> TargetInfo:
    """GET /v1/models for the model names and the engine; `engine` other than 'detect' wins."""
    request = urllib.request.Request(base_url + "/v1/models", headers={"User-Agent": "llmreplay"})
    if api_key:
        request.add_header("Authorization", f"Bearer {api_key}")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            server = response.headers.get("Server", "")
            payload = json.loads(response.read())
    except (urllib.error.URLError, OSError, ValueError) as exc:
        if engine != "detect":
            return TargetInfo(base_url, (), engine, "flag")
        raise BadInput(
            f"--target {base_url}: GET /v1/models failed ({exc}); pass --engine (and --model) to skip detection"
        ) from None
    entries = payload.get("data") if isinstance(payload, dict) else None
    entries = [e for e in entries or () if isinstance(e, dict)]
    models = tuple(str(e["id"]) for e in entries if "id" in e)
    if engine != "detect":
        return TargetInfo(base_url, models, engine, "flag")
    owners = " ".join(str(e.get("owned_by", "")) for e in entries).lower()
    for marker, name in _ENGINE_MARKERS:
        if marker in owners:
            return TargetInfo(base_url, models, name, "owned_by")
    for marker, name in _ENGINE_MARKERS:
        if marker in server.lower():
            return TargetInfo(base_url, models, name, "server header")
    return TargetInfo(base_url, models, "openai", "default")
