"""A run's server metrics read through the engine table's names (llmreplay.engines): series per role,
the run's summary (run.json), and what the reports show over time; pure but for reading the file.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict
from pathlib import Path

import pyarrow.parquet as pq

from llmreplay.engines import BY_NAME, PrometheusNames
from llmreplay.run_format import SERVER_METRICS_FILE, RunInfo


def engine_series(rows, names: PrometheusNames) -> dict[str, list[tuple[int, float]]]:
    """(offset_ns, value) per scrape of each quantity the engine row names, summed over label sets
    (one series per model or GPU): `rows` are the scraper's (offset_ns, time, metric, labels, value)."""
    wanted = {metric: role for role, metric in asdict(names).items() if metric}
    totals: dict[tuple[str, int], float] = {}
    for offset_ns, _, metric, _, value in rows:
        role = wanted.get(metric)
        if role is not None:
            totals[role, offset_ns] = totals.get((role, offset_ns), 0.0) + value
    series: dict[str, list[tuple[int, float]]] = {}
    for (role, offset_ns), value in sorted(totals.items(), key=lambda item: item[0][1]):
        series.setdefault(role, []).append((offset_ns, value))
    return series


def series_summary(series: dict[str, list[tuple[int, float]]]) -> dict[str, float | None]:
    """Where the queue formed, in a few numbers: peaks of the gauges, growth of the counters."""

    def peak(role):
        return max((v for _, v in series.get(role, ())), default=None)

    def growth(role):
        points = series.get(role)
        return points[-1][1] - points[0][1] if points else None

    queries, hits = growth("prefix_cache_queries"), growth("prefix_cache_hits")
    return {
        "peak_running": peak("running"),
        "peak_waiting": peak("waiting"),
        "peak_kv_cache_usage": peak("kv_cache_usage"),
        "prefix_cache_hit_share": hits / queries
        if queries and hits is not None
        else peak("prefix_cache_hit_rate"),
        "preemptions": growth("preemptions"),
    }


# What the reports show over time, in order: (quantity, title, unit); see report_series.
SHOWN = (
    ("waiting", "Queue: waiting requests", "requests"),
    ("running", "Running requests", "requests"),
    ("kv_cache_usage", "KV-cache usage", "share of the cache"),
    ("prefix_cache_hit_rate", "Prefix-cache hit rate", "share of prompt tokens"),
    ("preemptions", "Preemptions since the start", "preemptions"),
)
CHART_POINTS = 300  # a longer series is shown as this many windows: each window's peak (hit rate: mean)


def report_series(series: dict[str, list[tuple[int, float]]]) -> dict[str, list[tuple[int, float]]]:
    """engine_series as the reports show it: gauges as scraped, the prefix-cache hit rate between two
    scrapes (from the two counters, else the engine's own gauge), preemptions counted from the first scrape."""
    shown = {role: series[role] for role in ("waiting", "running", "kv_cache_usage") if series.get(role)}
    hit_rate = _hit_rate(series)
    if hit_rate:
        shown["prefix_cache_hit_rate"] = hit_rate
    if series.get("preemptions"):
        first = series["preemptions"][0][1]
        shown["preemptions"] = [(offset_ns, value - first) for offset_ns, value in series["preemptions"]]
    return shown


def _hit_rate(series: dict[str, list[tuple[int, float]]]) -> list[tuple[int, float]]:
    queries, hits = series.get("prefix_cache_queries"), dict(series.get("prefix_cache_hits", ()))
    if not queries or not hits:
        return series.get("prefix_cache_hit_rate", [])
    rates, last = [], None
    for offset_ns, looked_up in queries:
        found = hits.get(offset_ns)
        if found is None:
            continue
        if last is not None and looked_up > last[0]:  # no lookup in between: no rate, a gap
            rates.append((offset_ns, (found - last[1]) / (looked_up - last[0])))
        last = (looked_up, found)
    return rates


def run_server_metrics(run_dir: Path, info: RunInfo | None, time_scale: float = 1.0) -> dict | None:
    """The reports' view of a run's server_metrics.parquet, read through the names of run.json's engine:
    its summary and each shown quantity's peak, mean and points (trace seconds = own seconds x time_scale)."""
    path = Path(run_dir) / SERVER_METRICS_FILE
    engine = None if info is None else BY_NAME.get(info.target.engine)
    names = [name for name in asdict(engine.metrics).values() if name] if engine is not None else []
    if not names or not path.is_file():
        return None
    table = pq.read_table(path, columns=["offset_ns", "metric", "value"], filters=[("metric", "in", names)])
    offsets, metrics, values = (table.column(name).to_pylist() for name in ("offset_ns", "metric", "value"))
    series = engine_series(
        ((o, 0, m, "", v) for o, m, v in zip(offsets, metrics, values, strict=True)), engine.metrics
    )
    shown = report_series(series)
    if not shown:
        return None
    return {
        "engine": engine.name,
        "summary": series_summary(series),
        "series": {
            role: _shown(role, title, unit, shown[role], time_scale)
            for role, title, unit in SHOWN
            if role in shown
        },
    }


def _shown(role: str, title: str, unit: str, points: list[tuple[int, float]], time_scale: float) -> dict:
    """A quantity's title, unit, peak (and the trace time of its first peak), mean and chart points."""
    values = [value for _, value in points]
    peak = max(values)
    window = math.ceil(len(points) / CHART_POINTS)
    pick = statistics.fmean if role == "prefix_cache_hit_rate" else max
    return {
        "title": title,
        "unit": unit,
        "share": unit.startswith("share"),
        "peak": peak,
        "peak_at_s": points[values.index(peak)][0] / 1e9 * time_scale,
        "mean": statistics.fmean(values),
        "points": [
            [points[i][0] / 1e9 * time_scale, pick(values[i : i + window])]
            for i in range(0, len(points), window)
        ],
    }
