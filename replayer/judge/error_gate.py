"""Failed requests: the error rate (one definition for replay, report and compare), its gate, and the
commonest messages. Its base is the requests *counted*: sent and not ended by the client itself
(shed, cancelled as in production, cut at shutdown: the fidelity checks report those)."""

from __future__ import annotations

import json
import re
from collections import Counter

import numpy as np

from replayer.judge.run_fidelity import FAIL, OK

CLIENT_SIDE_ERRORS = frozenset({"cancelled", "client_disconnected", "shed_by_client", "shutdown"})
TOP_MESSAGES = 5
MESSAGE_CHARS = 200
_NUMBERS = re.compile(r"\d+")
_SPACE = re.compile(r"\s+")
_MESSAGE_FIELD = re.compile(r'"message"\s*:\s*"((?:[^"\\]|\\.)*)"')


def error_counts(error_kind: np.ndarray, sent: np.ndarray, success: np.ndarray) -> dict:
    """Counts of one side; `error_kind` holds objects (None on success)."""
    client_side = np.array([kind in CLIENT_SIDE_ERRORS for kind in error_kind], dtype=bool)
    counted = sent & ~client_side
    engine_errors = int((counted & ~success).sum())
    kinds: dict[str, int] = {}
    for kind in error_kind:
        if kind is not None:
            kinds[kind] = kinds.get(kind, 0) + 1
    total = int(counted.sum())
    return {
        "requests": int(error_kind.size),
        "counted": total,
        "engine_errors": engine_errors,
        "error_rate": engine_errors / total if total else None,
        "by_kind": dict(sorted(kinds.items(), key=lambda kv: -kv[1])),
        "client_side_kinds": sorted(CLIENT_SIDE_ERRORS & set(kinds)),
    }


def engine_error_mask(error_kind: np.ndarray, sent: np.ndarray, success: np.ndarray) -> np.ndarray:
    client_side = np.array([kind in CLIENT_SIDE_ERRORS for kind in error_kind], dtype=bool)
    return sent & ~client_side & ~success


def error_rate_check(label: str, counts: dict, max_error_rate: float) -> dict:
    """Fails when more than `max_error_rate` of the counted requests failed (`--max-error-rate`)."""
    rate = counts["error_rate"]
    kinds = ", ".join(f"{k} {v:,}" for k, v in counts["by_kind"].items() if k not in CLIENT_SIDE_ERRORS)
    ok = rate is None or rate <= max_error_rate
    rate_text = "n/a" if rate is None else f"{rate:.1%}"
    return {
        "check": f"{label}: error rate",
        "status": OK if ok else FAIL,
        "value": rate,
        "limit": max_error_rate,
        "detail": f"{counts['engine_errors']:,} of {counts['counted']:,} requests failed"
        + (f" ({kinds})" if kinds else ""),
        "summary": f"error rate {rate_text} > {max_error_rate:.0%}" + (f" ({kinds})" if kinds else ""),
    }


def error_message(detail: str | None) -> str:
    """The readable part of an error detail: an OpenAI-style error object's message, else the text."""
    if not detail:
        return ""
    text = detail
    try:
        obj = json.loads(detail)
    except ValueError:  # not JSON, or JSON cut at the 2 KB excerpt: a "message" field may still be there
        obj = None
        found = _MESSAGE_FIELD.search(detail)
        if found:
            try:
                text = json.loads(f'"{found.group(1)}"')
            except ValueError:
                text = found.group(1)
    if isinstance(obj, dict):
        inner = obj.get("error", obj)
        if isinstance(inner, dict):
            inner = inner.get("message") or inner.get("detail") or inner
        elif obj.get("message") is not None:
            inner = obj["message"]
        text = inner if isinstance(inner, str) else json.dumps(inner, sort_keys=True)
    text = _SPACE.sub(" ", text).strip()
    return text if len(text) <= MESSAGE_CHARS else text[: MESSAGE_CHARS - 1] + "…"


def commonest_messages(
    error_kind: np.ndarray,
    http_status: np.ndarray,
    error_detail: np.ndarray,
    mask: np.ndarray,
    limit: int = TOP_MESSAGES,
) -> list[dict]:
    """The `limit` commonest (kind, status, message) of the rows in `mask`, most frequent first.

    Messages that differ only in their numbers (request ids, token counts) count as one, shown by
    the first of them."""
    raw = Counter(
        zip(error_kind[mask].tolist(), http_status[mask].tolist(), error_detail[mask].tolist(), strict=True)
    )  # identical bodies are parsed once
    groups: dict[tuple, dict] = {}
    for (kind, status, detail), count in raw.items():
        status = int(status) if status == status else None  # NaN: no HTTP status
        message = error_message(detail)
        key = (kind, status, _NUMBERS.sub("#", message))
        group = groups.setdefault(key, {"kind": kind, "status": status, "message": message, "count": 0})
        group["count"] += count
    return sorted(groups.values(), key=lambda g: -g["count"])[:limit]
