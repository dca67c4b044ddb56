"""Scrape the target's Prometheus endpoint once a second during a run (a thread of the coordinator,
never a worker's event loop) into server_metrics.parquet; the engine table's names read the samples
for run.json's summary (replayer.results.server_series, which also reads them for the reports).
"""

from __future__ import annotations

import http.client
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pyarrow as pa

from llmreplay.bounded_read import MAX_ANSWER_BYTES, fetch
from llmreplay.engines import PrometheusNames
from llmreplay.probe_ids import probe_headers
from llmreplay.trace_arrow import TIMESTAMP_TYPE
from replayer.results.merge import write_parquet_atomic
from replayer.results.server_series import engine_series, series_summary

MAX_METRICS_BYTES = MAX_ANSWER_BYTES  # one scrape's answer; past it the scrape is a counted failure
# A scrape's deadline: an engine answers /metrics between its own steps (llama-server after the prefill
# it is in), so a busy one may take seconds; a slow scrape only delays the next. Prometheus's default is 10 s.
MIN_SCRAPE_TIMEOUT_S = 5.0

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


class MetricsScraper:
    """Scrapes `url` every `interval_ns` on its own thread; failures are counted, not fatal. `names`:
    the engine row's, which read the samples for run.json; `source`: "flag" or "default" (the target's own)."""

    def __init__(
        self,
        url: str,
        interval_ns: int,
        start_ns: int,
        api_key: str | None = None,
        names: PrometheusNames | None = None,
        source: str = "flag",
    ):
        self.url = url
        self.names = names or PrometheusNames()
        self.source = source
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
        self._thread.join(timeout=MIN_SCRAPE_TIMEOUT_S + 5)

    def _run(self) -> None:
        tick = max(self.start_ns, time.perf_counter_ns())
        while not self._stop.is_set():
            self._scrape_once()
            tick += self.interval_ns
            delay = (tick - time.perf_counter_ns()) / 1e9
            if delay > 0 and self._stop.wait(delay):
                break

    def _scrape_once(self) -> None:
        headers = {"User-Agent": "llmreplay", **probe_headers("metrics")}
        request = urllib.request.Request(self.url, headers=headers)
        if self._api_key:
            request.add_header("Authorization", f"Bearer {self._api_key}")
        offset_ns = time.perf_counter_ns() - self.start_ns
        wall_us = time.time_ns() // 1000
        try:  # the whole answer within the deadline and the size bound, or a counted failure
            _, body = fetch(request, max(self.interval_ns / 1e9, MIN_SCRAPE_TIMEOUT_S), MAX_METRICS_BYTES)
            text = body.decode("utf-8", "replace")
        except (urllib.error.URLError, OSError, ValueError, http.client.HTTPException) as exc:
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

    def info(self) -> dict:
        """run.json's `server_metrics`: where, how it went, and the summary through the row's names."""
        return {
            "url": self.url,
            "from": self.source,
            "scrapes": self.scrapes,
            "failures": self.failures,
            "last_error": self.last_error,
            "summary": self.summary(self.names),
        }

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
