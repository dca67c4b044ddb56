"""The labels every exported series carries: run, target (scheme://host:port, nothing else of the URL),
engine, model. Label values never hold userinfo, a path or a query (where keys hide)."""

from __future__ import annotations

import urllib.parse
from pathlib import Path

LABEL_NAMES = ("run", "target", "engine", "model")
_DEFAULT_PORTS = {"http": 80, "https": 443}


def target_label(url: str) -> str:
    """`scheme://host:port` of a URL; userinfo, path, query and fragment dropped, the port made explicit."""
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError:
        return ""
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    port = port if port is not None else _DEFAULT_PORTS.get(parts.scheme)
    return f"{parts.scheme}://{host}" + (f":{port}" if port is not None else "")


def model_label(model: str | None, model_map, served) -> str:
    """The model the requests went to: --model, else --model-map's targets, else the served models."""
    if model:
        return model
    mapped = sorted({staging for _, staging in model_map or ()})
    return ",".join(mapped or sorted(served or ()))


def run_labels(
    run_label: str | None, run_dir, target_url: str, engine: str | None, model: str
) -> dict[str, str]:
    """The four labels; `run_label` None: the run directory's name."""
    return {
        "run": run_label or Path(run_dir).name,
        "target": target_label(target_url),
        "engine": engine or "",
        "model": model,
    }
