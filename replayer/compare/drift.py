"""A soak's drift: its first loop against its last (the same source requests, paired like a compare), and
the trend of the server's queue, KV usage and memory over the run. Pure, but for reading server metrics.

The paired cells come from replayer.compare.sides (the compare machinery); this module names their
verdicts, picks the metrics shown and fits the trends.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq

import replayer.judge.stats as judge_stats
from llmreplay.engines import BY_NAME
from llmreplay.run_format import SERVER_METRICS_FILE, RunInfo
from replayer.results.server_series import engine_series

DRIFT_METRICS = ("ttft", "tpot", "e2e")
DRIFT_PERCENTILES = ("p50", "p95", "p99")
# A compare verdict of the last loop against the first, as a drift verdict.
DRIFT_WORDS = {
    judge_stats.REGRESSION: "drifted_up",
    judge_stats.NO_CHANGE: "stable",
    judge_stats.IMPROVEMENT: "improved",
    judge_stats.INCONCLUSIVE: "inconclusive",
    judge_stats.NO_DATA: "no_data",
}
TREND_ROLES = ("kv_cache_usage", "waiting", "running")  # engine-table roles (llmreplay.engines)
PROCESS_MEMORY_METRIC = "process_resident_memory_bytes"  # the Prometheus client's; engines that expose it
RISE_SHARE = 0.10  # a trend is a finding when its fitted rise over the run is at least this share of its mean
RISE_ABSOLUTE_SHARE = 0.05  # ... or, for a 0..1 gauge (KV usage), this much of the cache
MIN_R2 = 0.5  # ... and the line explains at least half the series' variance


def soak_loops(loops: np.ndarray) -> tuple[int, int] | None:
    """(first, last) loop of a run's measured rows to compare: the last with as many rows as the first
    (the soak's end usually cuts the final loop short), else the last; None when the run did not loop."""
    if loops.size == 0 or int(loops.max()) == 0:
        return None
    counts = np.bincount(loops)
    first = int(np.flatnonzero(counts)[0])
    full = np.flatnonzero(counts >= counts[first])
    last = int(full[-1]) if full[-1] > first else int(loops.max())
    return first, last


def loop_mask(table, loop: int):
    return pc.equal(table.column("loop"), loop)


def drift_cells(latency: dict, errors: dict, last_label: str) -> dict:
    """The drift verdict per metric and percentile from compare's latency rows and error comparison."""
    out = {}
    for name in DRIFT_METRICS:
        comparison = latency.get(name, {}).get("comparison", {})
        out[name] = {
            q: {**cell, "verdict": DRIFT_WORDS.get(cell["verdict"], cell["verdict"])}
            for q, cell in comparison.items()
            if q in DRIFT_PERCENTILES
        }
    rate = errors.get("comparison")
    if rate is not None:
        first, last = errors["baseline"]["error_rate"], errors[last_label]["error_rate"]
        verdict = DRIFT_WORDS.get(rate["verdict"], rate["verdict"])
        out["error_rate"] = {**rate, "first": first, "last": last, "verdict": verdict}
    return out


def drift_headline(cells: dict) -> str:
    """One line: which metrics drifted up, else whether the loops were stable."""
    up = [
        f"{name} {q}"
        for name, by_q in cells.items()
        if name != "error_rate"
        for q, c in by_q.items()
        if c["verdict"] == "drifted_up"
    ]
    if cells.get("error_rate", {}).get("verdict") == "drifted_up":
        up.append("error rate")
    if up:
        return "drifted up: " + ", ".join(up)
    verdicts = [c["verdict"] for name, by_q in cells.items() if name != "error_rate" for c in by_q.values()]
    if verdicts and all(v in ("stable", "improved") for v in verdicts):
        return "stable: no metric drifted from the first loop to the last"
    return "no drift shown: some cells are inconclusive (more loops or requests narrow them)"


def trend(points: list[tuple[int, float]], share: bool = False) -> dict | None:
    """Least-squares slope per hour, first and last value, and whether it is a rising finding."""
    if len(points) < 3:
        return None
    t = np.array([p[0] for p in points], dtype=float) / 3.6e12  # hours
    v = np.array([p[1] for p in points], dtype=float)
    if np.ptp(t) == 0:
        return None
    slope, intercept = np.polyfit(t, v, 1)
    fitted = slope * t + intercept
    total = float(((v - v.mean()) ** 2).sum())
    r2 = 1.0 - float(((v - fitted) ** 2).sum()) / total if total > 0 else 0.0
    rise = float(slope * np.ptp(t))
    bar = RISE_ABSOLUTE_SHARE if share else RISE_SHARE * abs(float(v.mean()))
    return {
        "slope_per_hour": float(slope),
        "first": float(v[0]),
        "last": float(v[-1]),
        "rise": rise,
        "r2": r2,
        "rising": bool(rise > 0 and rise >= bar and r2 >= MIN_R2),
    }


def server_trends(run_dir: Path, info: RunInfo | None) -> dict:
    """Each trend role's (and process memory's) trend over the run; {} without server metrics."""
    path = Path(run_dir) / SERVER_METRICS_FILE
    engine = None if info is None else BY_NAME.get(info.target.engine)
    if engine is None or not path.is_file():
        return {}
    table = pq.read_table(path, columns=["offset_ns", "metric", "value"])
    rows = zip(*(table.column(n).to_pylist() for n in ("offset_ns", "metric", "value")), strict=True)
    scraped = [(o, 0, m, "", v) for o, m, v in rows]
    series = engine_series(scraped, engine.metrics)
    memory: dict[int, float] = {}
    for offset_ns, _, metric, _, value in scraped:
        if metric == PROCESS_MEMORY_METRIC:
            memory[offset_ns] = memory.get(offset_ns, 0.0) + value
    if memory:
        series["process_memory_bytes"] = sorted(memory.items())
    out = {}
    for role in (*TREND_ROLES, "process_memory_bytes"):
        fitted = trend(series.get(role, []), share=role == "kv_cache_usage")
        if fitted is not None:
            out[role] = fitted
    return out


def findings(cells: dict, trends: dict) -> list[str]:
    """One line per drifted metric and per rising server series (a leak or a growing queue)."""
    lines = []
    for name, by_q in cells.items():
        if name == "error_rate":
            if by_q.get("verdict") == "drifted_up":
                lines.append(f"error rate rose from {by_q['first']:.1%} to {by_q['last']:.1%}")
            continue
        for q, cell in by_q.items():
            if cell["verdict"] == "drifted_up":
                lines.append(
                    f"{name.upper()} {q} drifted up x{cell['ratio']:.2f} [{cell['ci_low']:.2f}, {cell['ci_high']:.2f}]"
                )
    for role, fitted in trends.items():
        if fitted["rising"]:
            lines.append(
                f"{role} rises {fitted['slope_per_hour']:.4g}/h ({fitted['first']:.4g} -> {fitted['last']:.4g}, "
                f"r2 {fitted['r2']:.2f}): a slow leak or a growing queue"
            )
    return lines
