"""The cold start: the first requests after a replay starts, reported apart from the rest.

The rule, stated once: with --warmup the warm-up rows are the cold start; without, the requests sent
within COLD_START_NS of the first send or the first COLD_START_SHARE of the run, whichever is shorter.
Pure over per-request arrays (replayer.measured.requests), but for `cold_start`, which builds them.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pyarrow as pa

from replayer.measured.requests import RequestColumns, build_requests
from replayer.measured.samples import distribution
from replayer.measured.side import Side

COLD_START_NS = 10_000_000_000  # 10 s
COLD_START_SHARE = 0.05  # of the run's span, first send to last answer
TAIL_METRICS = ("ttft", "e2e")
TAIL_PERCENTILE = 99
DOMINANCE = 3.0  # a tail is dominated when cold requests are this over-represented above its p99 ...
MIN_TAIL_COLD = 2  # ... and at least this many of them are there
RULE = (
    "cold start: the warm-up rows when the run had --warmup; otherwise the requests sent within 10 s of "
    "the first send or the first 5% of the run, whichever is shorter"
)


def cold_window_ns(start_ns: np.ndarray, end_ns: np.ndarray) -> float:
    """How long after the first send a request counts as cold (no warm-up)."""
    sent = np.isfinite(start_ns)
    if not sent.any():
        return 0.0
    span = float(np.nanmax(end_ns[sent]) - np.nanmin(start_ns[sent]))
    return min(COLD_START_NS, COLD_START_SHARE * span)


def cold_mask(req: RequestColumns) -> np.ndarray:
    """The rows sent within cold_window_ns of the first send (req.start_ns is from the first send)."""
    return np.isfinite(req.start_ns) & (req.start_ns < cold_window_ns(req.start_ns, req.end_ns))


def tail_share(values: np.ndarray, cold: np.ndarray, percentile: float = TAIL_PERCENTILE) -> dict | None:
    """How over-represented the cold rows are among the values above the `percentile` of all of them."""
    ok = np.isfinite(values)
    if ok.sum() < 2 or not cold[ok].any():
        return None
    threshold = float(np.percentile(values[ok], percentile))
    above = ok & (values > threshold)
    cold_above = int((above & cold).sum())
    share_all = float(cold[ok].mean())
    share_above = cold_above / int(above.sum()) if above.any() else 0.0
    return {
        "threshold_ms": threshold / 1e6,
        "above": int(above.sum()),
        "cold_above": cold_above,
        "over_representation": share_above / share_all if share_all else None,
    }


def dominates(tail: dict | None) -> bool:
    return bool(
        tail
        and tail["cold_above"] >= MIN_TAIL_COLD
        and tail["over_representation"] is not None
        and tail["over_representation"] >= DOMINANCE
    )


def cold_start_section(req: RequestColumns, cold: np.ndarray, source: str) -> dict:
    """The cold rows' TTFT and E2E beside the rest's, the tails they sit in, and a note when they
    dominate one. `req`: every row (warm-up rows included); `source`: "warmup" or "first_requests"."""
    metrics, tails, dominated = {}, {}, []
    for name in TAIL_METRICS:
        values = req.latency_ns[name]
        finite = np.isfinite(values)
        metrics[name] = {
            "cold": distribution(np.sort(values[finite & cold])),
            "rest": distribution(np.sort(values[finite & ~cold])),
        }
        tails[name] = tail_share(values, cold)
        if dominates(tails[name]):
            dominated.append(name)
    note = None
    if dominated:
        names = " and ".join(f"{n.upper()} p{TAIL_PERCENTILE}" for n in dominated)
        where = "the warm-up" if source == "warmup" else "the cold start"
        hint = "" if source == "warmup" else "; replay with --warmup to keep it out of the verdict"
        note = f"{where} dominates the {names} tail (>= {DOMINANCE:g}x over-represented above it){hint}"
    return {
        "rule": RULE,
        "source": source,
        "requests": int(cold.sum()),
        "of": len(req),
        "metrics": metrics,
        "tails": tails,
        "note": note,
    }


def cold_start(side: Side) -> dict:
    """A run's cold start (the rule above) beside the rest of its requests."""
    warm = side.warmup
    if warm is not None and warm.num_rows:
        req = build_requests(dataclasses.replace(side, table=pa.concat_tables([warm, side.table])))
        return cold_start_section(req, np.arange(len(req)) < warm.num_rows, "warmup")
    req = build_requests(side)
    return cold_start_section(req, cold_mask(req), "first_requests")
