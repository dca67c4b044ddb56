"""Small stdlib HTTP helpers for the engine tests, and the figures they measure (printed at the end)."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
MAX_MODEL_LEN = 8192  # --max-model-len of vLLM, -c per slot of llama-server
MAX_NUM_SEQS = 16  # --max-num-seqs of vLLM, -np of llama-server
# The replay client shares the two cores with the engine (vLLM's prefill of a burst of long prompts has held
# it back 2-3 s here): dispatch lag is not what the engine tests test.
MAX_DISPATCH_LAG = "10s"


def http_json(method: str, url: str, body: dict | None = None, timeout: float = 120.0) -> tuple[int, dict | str]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            raw = resp.read()
            status = resp.status
    except urllib.error.HTTPError as e:
        raw = e.read()
        status = e.code
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw.decode(errors="replace")


def http_text(url: str, timeout: float = 30.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status, resp.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")


def sse_events(url: str, body: dict, timeout: float = 300.0) -> Iterator[dict | str]:
    """POST a streamed request; yields each `data:` payload parsed as JSON, and the string "[DONE]"."""
    req = urllib.request.Request(url, data=json.dumps({**body, "stream": True}).encode(), method="POST",
                                 headers={"Content-Type": "application/json", "Accept": "text/event-stream"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        assert resp.status == 200, resp.status
        for raw in resp:
            line = raw.decode().strip()
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                yield "[DONE]"
                return
            yield json.loads(data)


# --- measured figures, printed at the end of the run ---------------------------------------------------

FIGURES: dict[str, dict] = {}


def record_figure(engine: str, key: str, value) -> None:
    """Keep a measured figure (prompt-length mismatch, cached tokens, start-up time) for the summary."""
    FIGURES.setdefault(engine, {})[key] = value


# --- Prometheus histograms -------------------------------------------------------------------------------


def histogram_buckets(text: str, name: str) -> dict[float, float]:
    """Cumulative counts of histogram `name` by upper bound `le`, summed over its label sets ({} if absent)."""
    buckets: dict[float, float] = {}
    pattern = re.compile(re.escape(name) + r'_bucket\{(?:[^}]*,)?le="([^"]+)"[^}]*\}\s+(\S+)')
    for match in pattern.finditer(text):
        le = float(match.group(1))
        buckets[le] = buckets.get(le, 0.0) + float(match.group(2))
    return buckets


def histogram_delta(before: dict[float, float], after: dict[float, float]) -> dict[float, float]:
    """What was observed between two scrapes of one cumulative histogram."""
    return {le: after[le] - before.get(le, 0.0) for le in sorted(after)}


def rank_bucket(cumulative: dict[float, float], rank: int) -> tuple[float, float]:
    """The bucket (lower, upper] holding the rank-th smallest observation (1-based) of a cumulative histogram."""
    lower = 0.0
    for le in sorted(cumulative):
        if cumulative[le] >= rank:
            return lower, le
        lower = le
    raise AssertionError(f"no bucket holds observation {rank} of {cumulative}")


def neighbour_edges(cumulative: dict[float, float], bucket: tuple[float, float]) -> tuple[float, float]:
    """The lower edge of the bucket below `bucket` and the upper edge of the one above (0 and inf at the ends)."""
    edges = [0.0, *sorted(cumulative)]
    i = edges.index(bucket[1])
    return edges[max(0, i - 2)], edges[min(len(edges) - 1, i + 1)]
