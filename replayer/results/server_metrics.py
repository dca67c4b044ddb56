"""Scrape the target's Prometheus endpoint once a second during a run (a thread of the coordinator,
never a worker's event loop) and store the samples as server_metrics.parquet; the engine table's
names (llmreplay.engines) say which samples are the queue, the running batch, the KV cache and preemptions.
"""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request
from dataclasses import asdict
from pathlib import Path

import pyarrow as pa

from llmreplay.engines import PrometheusNames
from llmreplay.trace_arrow import TIMESTAMP_TYPE
from replayer.results.merge import write_parquet_atomic

SERVER_METRICS_SCHEMA = pa.schema(
    [
        pa.field("offset_ns", pa.int64(), nullable=False),  # scrape time from the run's start (monotonic)
        pa.field("time", TIMESTAMP_TYPE, nullable=False),  # wall-clock anchor of the scrape
        pa.field("metric", pa.string(), nullable=False),
        pa.field("labels", pa.string(), nullable=False),  # the `{...}` text as exposed, "" when none
        pa.field("value", pa.float64(), nullable=False),
    ]
)


def parse_prometheus(text: str) -> list[tuple[str, str, float]]:
    """(metric, labels, value) of every sample, histogram buckets left out (too many, rarely useful)."""
    samples = []
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        brace = line.find("{")
        if brace >= 0:
            close = line.rfind("}")
            name, labels, rest = line[:brace], line[brace : close + 1], line[close + 1 :]
        else:
            name, _, rest = line.partition(" ")
            labels = ""
        if name.endswith("_bucket"):
            continue
        fields = rest.split()
        if not fields:
            continue
        try:
            value = float(fields[0])
        except ValueError:
            continue
        samples.append((name, labels, value))
    return samples


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


class MetricsScraper:
    """Scrapes `url` every `interval_ns` on its own thread; failures are counted, not fatal."""

    def __init__(self, url: str, interval_ns: int, start_ns: int, api_key: str | None = None):
        self.url = url
        self.interval_ns = interval_ns
        self.start_ns = start_ns
        self._api_key = api_key
        self.rows: list[tuple[int, int, str, str, float]] = []
        self.scrapes = 0
        self.failures = 0
        self.last_error: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="server-metrics", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        tick = max(self.start_ns, time.perf_counter_ns())
        while not self._stop.is_set():
            self._scrape_once()
            tick += self.interval_ns
            delay = (tick - time.perf_counter_ns()) / 1e9
            if delay > 0 and self._stop.wait(delay):
                break

    def _scrape_once(self) -> None:
        request = urllib.request.Request(self.url, headers={"User-Agent": "llmreplay"})
        if self._api_key:
            request.add_header("Authorization", f"Bearer {self._api_key}")
        offset_ns = time.perf_counter_ns() - self.start_ns
        wall_us = time.time_ns() // 1000
        try:
            with urllib.request.urlopen(request, timeout=self.interval_ns / 1e9) as response:
                text = response.read().decode("utf-8", "replace")
        except (urllib.error.URLError, OSError, ValueError) as exc:
            self.failures += 1
            self.last_error = str(exc)[:200]
            return
        self.scrapes += 1
        self.rows.extend(
            (offset_ns, wall_us, name, labels, value) for name, labels, value in parse_prometheus(text)
        )

    def summary(self, names: PrometheusNames) -> dict[str, float | None]:
        """series_summary of what was scraped, read through an engine row's names."""
        return series_summary(engine_series(self.rows, names))

    def write(self, path: Path) -> None:
        columns = list(zip(*self.rows, strict=True)) if self.rows else [[], [], [], [], []]
        table = pa.table(
            [
                pa.array(col, type=field.type)
                for col, field in zip(columns, SERVER_METRICS_SCHEMA, strict=True)
            ],
            schema=SERVER_METRICS_SCHEMA,
        )
        write_parquet_atomic(path, table)
