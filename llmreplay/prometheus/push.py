"""Send a finished run's figures (llmreplay.prometheus.run_figures) to a Pushgateway, grouped by its four
labels, and/or by Prometheus remote-write 1.0 (a snappy-compressed protobuf WriteRequest). A failure is
one warning line: the run on disk is the record, and its exit status stays the verdict's."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from pathlib import Path

from llmreplay.prometheus.config import ObserveConfig
from llmreplay.prometheus.labels import target_label
from llmreplay.prometheus.run_figures import Figure, labels_of, read_finished_run, run_figures

JOB = "llmreplay"
TIMEOUT_S = 10.0
USER_AGENT = "llmreplay-push"


def push_run(run_dir: Path, config: ObserveConfig, console=None) -> list[str]:
    """Push to every target `config` names; returns the warnings printed (empty when all went through)."""
    run = read_finished_run(run_dir)
    labels = labels_of(run, run_dir, config.run_label)
    figures = run_figures(run)
    sends = (
        ("--pushgateway", config.pushgateway, push_to_gateway),
        ("--remote-write", config.remote_write, remote_write),
    )
    warnings = []
    for flag, url, send in sends:
        if url is None:
            continue
        try:
            send(url, labels, figures, config.push_headers)
        except Exception as exc:  # noqa: BLE001 (any failure to send is the same one warning line)
            warnings.append(
                f"warning: {flag} {target_label(url)}: not sent ({_reason(exc)}); the run is in {run_dir}"
            )
    for line in warnings:
        if console is not None:
            console.print(line, markup=False, highlight=False, soft_wrap=True)
    return warnings


def _reason(exc: Exception) -> str:
    """One line, without the URL (its path or query may hold a key)."""
    if isinstance(exc, urllib.error.HTTPError):
        return f"HTTP {exc.code} {exc.reason}"
    if isinstance(exc, urllib.error.URLError):
        return str(exc.reason).splitlines()[0] if str(exc.reason) else type(exc).__name__
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def push_to_gateway(url: str, labels: dict[str, str], figures: list[Figure], headers=()) -> None:
    """PUT the figures to the Pushgateway's group job=llmreplay + the run's labels (replacing that group)."""
    import prometheus_client
    from prometheus_client.exposition import default_handler

    registry = prometheus_client.CollectorRegistry(auto_describe=False)
    registry.register(_Families(figures))

    extra = list(headers)

    def handler(url, method, timeout, headers, data):  # prometheus_client calls it by these names
        return default_handler(url, method, timeout, [*headers, *extra], data)

    prometheus_client.push_to_gateway(
        url, job=JOB, registry=registry, grouping_key=labels, timeout=TIMEOUT_S, handler=handler
    )


class _Families:
    """The figures as prometheus_client metric families (the run's labels go in the grouping key)."""

    def __init__(self, figures: list[Figure]):
        self.figures = figures

    def collect(self):
        from prometheus_client.metrics_core import Metric

        for figure in self.figures:
            family = Metric(figure.name, figure.help, figure.kind)
            for name, extra, value in figure.samples:
                family.add_sample(name, extra, value)
            yield family


def write_request(labels: dict[str, str], figures: list[Figure], at_ms: int) -> bytes:
    """The remote-write 1.0 body before compression: one series a sample, labels sorted by name."""
    from opentelemetry.exporter.prometheus_remote_write.gen.remote_pb2 import WriteRequest

    request = WriteRequest()
    for figure in figures:
        for name, extra, value in figure.samples:
            series = request.timeseries.add()
            for key, text in sorted({**labels, **extra, "job": JOB, "__name__": name}.items()):
                series.labels.add(name=key, value=text)
            series.samples.add(value=value, timestamp=at_ms)
    return request.SerializeToString()


def remote_write(url: str, labels: dict[str, str], figures: list[Figure], headers=()) -> None:
    """POST the figures, stamped now (a receiver refuses samples far in the past), snappy block format."""
    import cramjam

    body = bytes(cramjam.snappy.compress_raw(write_request(labels, figures, int(time.time() * 1000))))
    request = urllib.request.Request(url, data=body, method="POST")
    for name, value in (
        ("Content-Type", "application/x-protobuf"),
        ("Content-Encoding", "snappy"),
        ("X-Prometheus-Remote-Write-Version", "0.1.0"),
        ("User-Agent", USER_AGENT),
        *headers,
    ):
        request.add_header(name, value)
    with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
        response.read()
