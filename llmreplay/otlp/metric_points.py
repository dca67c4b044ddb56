"""A run's GenAI metrics as the SDK's own export types (MetricsData), with the run's wall-clock timestamps.

Why not the SDK's instruments: a MeterProvider stamps every measurement and collection with the time of
the call, so a run exported after it ended would plot at export time. HistogramDataPoint takes explicit
start and end times and OTLPMetricExporter sends them as given, so the histograms are aggregated here
(numpy, the semconv's bucket boundaries) and encoded and sent by the SDK's exporter: no hand-built protobuf.
Cumulative temporality (what Prometheus-compatible backends ingest): one point a series per step of the
run, counting every request that ended since the run's first send.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from llmreplay.errors import BadInput
from llmreplay.otlp import semconv
from llmreplay.otlp.run_requests import RunRequests
from llmreplay.otlp.samples import NS_PER_S, Samples, run_samples

DEFAULT_STEP_S = 10.0
MAX_POINTS = 720  # a series' points when the step is not given: the step grows past 10 s beyond 2 hours
MAX_GIVEN_POINTS = 20_000  # what a given --otlp-step may ask for (memory: series x points x buckets)


@dataclass(frozen=True, slots=True)
class Windows:
    start_ns: int  # every cumulative point's start: the run's first send
    end_ns: int  # the last point's time: the run's last answer
    step_ns: int

    @property
    def count(self) -> int:
        return max(1, -(-(self.end_ns - self.start_ns) // self.step_ns))  # the run's end closes the last one

    def time_ns(self, window: int) -> int:
        return min(self.start_ns + (window + 1) * self.step_ns, self.end_ns)


def windows_of(run: RunRequests, step_s: float | None) -> Windows:
    """The run's span cut into steps: the given one, or 10 s (coarser past MAX_POINTS)."""
    start, end = run.first_ns, max(run.last_ns, run.first_ns + 1)
    if step_s is None:
        step_ns = max(round(DEFAULT_STEP_S * NS_PER_S), -(-(end - start) // MAX_POINTS))
        return Windows(start, end, -(-step_ns // NS_PER_S) * NS_PER_S)  # whole seconds
    windows = Windows(start, end, max(1, round(step_s * NS_PER_S)))
    if windows.count > MAX_GIVEN_POINTS:
        raise BadInput(
            f"--otlp-step {step_s:g}s: the run spans {(end - start) / 1e9:.0f} s, {windows.count} points a "
            f"series (at most {MAX_GIVEN_POINTS}); give a longer step"
        )
    return windows


def histogram_points(
    samples: Samples, attributes: list[dict], bounds: tuple[float, ...], windows: Windows
) -> list:
    """Cumulative HistogramDataPoints: per series, one a window from its first sample's window on."""
    from opentelemetry.sdk.metrics.export import HistogramDataPoint

    series_count, buckets, count = len(attributes), len(bounds) + 1, windows.count
    cell = samples.series * count + np.clip(
        (samples.at_ns - windows.start_ns) // windows.step_ns, 0, count - 1
    )
    slot = cell * buckets + np.searchsorted(np.asarray(bounds), samples.values, side="left")  # (b[i-1], b[i]]
    shape = (series_count, count)
    counts = (
        np.bincount(slot, minlength=series_count * count * buckets).reshape(*shape, buckets).cumsum(axis=1)
    )
    sums = (
        np.bincount(cell, weights=samples.values, minlength=series_count * count)
        .reshape(shape)
        .cumsum(axis=1)
    )
    lows, highs = np.full(series_count * count, np.inf), np.full(series_count * count, -np.inf)
    np.minimum.at(lows, cell, samples.values)
    np.maximum.at(highs, cell, samples.values)
    lows = np.minimum.accumulate(lows.reshape(shape), axis=1)
    highs = np.maximum.accumulate(highs.reshape(shape), axis=1)
    totals = counts.sum(axis=2)
    return [
        HistogramDataPoint(
            attributes=attributes[series],
            start_time_unix_nano=windows.start_ns,
            time_unix_nano=windows.time_ns(window),
            count=int(totals[series, window]),
            sum=float(sums[series, window]),
            bucket_counts=counts[series, window].tolist(),
            explicit_bounds=list(bounds),
            min=float(lows[series, window]),
            max=float(highs[series, window]),
        )
        for series in range(series_count)
        for window in range(int(np.argmax(totals[series] > 0)) if totals[series, -1] else count, count)
    ]


def metrics_data(run: RunRequests, windows: Windows, scope, resource):
    """The run's MetricsData: every metric of semconv.METRICS that has samples; (data, point count)."""
    from opentelemetry.sdk.metrics.export import (
        AggregationTemporality,
        Histogram,
        Metric,
        MetricsData,
        ResourceMetrics,
        ScopeMetrics,
    )

    samples = run_samples(run)
    metrics, points = [], 0
    for spec in semconv.METRICS:
        found, attributes = samples[spec.name]
        built = histogram_points(found, attributes, spec.bounds, windows)
        if not built:
            continue
        points += len(built)
        data = Histogram(data_points=built, aggregation_temporality=AggregationTemporality.CUMULATIVE)
        metrics.append(Metric(name=spec.name, description=spec.description, unit=spec.unit, data=data))
    scope_metrics = ScopeMetrics(scope=scope, metrics=metrics, schema_url=semconv.SCHEMA.value)
    resource_metrics = ResourceMetrics(
        resource=resource, scope_metrics=[scope_metrics], schema_url=semconv.SCHEMA.value
    )
    return MetricsData(resource_metrics=[resource_metrics]), points
