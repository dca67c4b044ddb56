"""Send a finished run to an OTLP/HTTP collector with the SDK's exporters; a refusal is one OtlpExportFailed.

The exporters retry 429/502/503/504 and connection errors until --otlp-timeout and log each try; those
records are kept from stderr, and what the last try came to (watched on the exporter's requests.Session)
is the failure's one-line reason.
"""

from __future__ import annotations

import contextlib
import logging
import re
from dataclasses import dataclass
from pathlib import Path

from llmreplay.errors import BadInput
from llmreplay.otlp.config import INSTALL_HINT, OtlpConfig


class OtlpExportFailed(Exception):
    """The collector refused the export, or could not be reached: the message is the one-line reason."""


@dataclass(frozen=True, slots=True)
class ExportReport:
    run_id: str
    requests: int
    not_sent: int
    metric_points: int
    spans: int


def require_sdk() -> None:
    """BadInput (exit 2, before any run) when the OpenTelemetry SDK or its OTLP/HTTP exporter is missing."""
    import importlib.util

    for module in ("opentelemetry.sdk", "opentelemetry.exporter.otlp.proto.http"):
        try:
            found = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:
            found = False
        if not found:
            raise BadInput(f"--otlp-endpoint: the OpenTelemetry SDK is not installed ({INSTALL_HINT})")


def export_run(config: OtlpConfig, run: Path, name: str | None = None) -> ExportReport:
    """The run at `run` sent: metrics, then spans, each if asked for. A signal the collector refuses (a
    backend that takes only traces answers 404 to metrics) does not stop the other; a collector that cannot
    be reached stops both. OtlpExportFailed names what failed and what was sent."""
    from llmreplay.otlp.run_requests import read_run_requests

    requests = read_run_requests(run, name)
    resource, scope = _resource_and_scope(requests.resource)
    failed: list[str] = []
    points = spans = 0
    with _caught_logs():
        if config.otlp_metrics:
            points, outcome = _send_metrics(config, requests, resource, scope)
            if outcome is not None:
                failed.append(f"metrics: {outcome}")
                if not outcome.startswith("HTTP"):
                    raise OtlpExportFailed(failed[0])
        if config.otlp_spans:
            spans, outcome = _send_spans(config, requests, resource, scope)
            if outcome is not None:
                failed.append(f"spans: {outcome} (after {spans} spans)")
    if failed:
        sent = f" (sent: {points} metric points)" if points and not failed[0].startswith("metrics") else ""
        raise OtlpExportFailed("; ".join(failed) + sent)
    return ExportReport(requests.run_id, requests.table.num_rows, requests.not_sent, points, spans)


def _exporter_options(config: OtlpConfig) -> dict:
    return {
        "headers": dict(config.otlp_headers) or None,  # None: the SDK reads OTEL_EXPORTER_OTLP_*HEADERS
        "timeout": config.otlp_timeout_s,
        "session": _watched_session(),
    }


def _send_metrics(config: OtlpConfig, requests, resource, scope) -> tuple[int, str | None]:
    """(points, None) once the collector took them; (points, the last answer) when it did not."""
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    from opentelemetry.sdk.metrics.export import MetricExportResult

    from llmreplay.otlp.metric_points import metrics_data, windows_of

    data, points = metrics_data(requests, windows_of(requests, config.otlp_step_s), scope, resource)
    options = _exporter_options(config)
    exporter = OTLPMetricExporter(endpoint=f"{config.endpoint}/v1/metrics", **options)
    result = exporter.export(data)
    exporter.shutdown()
    return points, None if result is MetricExportResult.SUCCESS else options["session"].outcome


def _send_spans(config: OtlpConfig, requests, resource, scope) -> tuple[int, str | None]:
    """(spans the collector took, None or the last answer when it refused a batch)."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    from llmreplay.otlp.spans import send_spans

    options = _exporter_options(config)
    sent = send_spans(
        requests, OTLPSpanExporter(endpoint=f"{config.endpoint}/v1/traces", **options), resource, scope
    )
    return sent.sent, options["session"].outcome if sent.failed else None


def _resource_and_scope(attributes: dict):
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope

    from llmreplay import __version__
    from llmreplay.otlp import semconv

    scope = InstrumentationScope(
        semconv.SCOPE_NAME,
        __version__,
        semconv.SCHEMA.value,
        {"llmreplay.semconv.version": semconv.SEMCONV_VERSION},
    )
    return Resource(attributes, semconv.SCHEMA.value), scope


@contextlib.contextmanager
def _caught_logs():
    """The SDK's log records while exporting, kept from stderr (many lines, one a retry)."""
    logger = logging.getLogger("opentelemetry")
    saved = logger.propagate
    handler = logging.NullHandler()
    logger.addHandler(handler)
    logger.propagate = False
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.propagate = saved


_ERRNO = re.compile(r"\[Errno -?\d+\] ([^'\")\]]+)")


def _watched_session():
    """A requests.Session (the exporter's own transport) that keeps what its last request came to."""
    import requests

    class Watched(requests.Session):
        outcome = "no answer"

        def request(self, *args, **kwargs):
            try:
                response = super().request(*args, **kwargs)
            except requests.Timeout:
                self.outcome = "no answer within --otlp-timeout"
                raise
            except requests.RequestException as exc:
                found = _ERRNO.search(str(exc))
                self.outcome = (
                    f"could not connect ({found.group(1).strip() if found else type(exc).__name__})"
                )
                raise
            self.outcome = f"HTTP {response.status_code} {response.reason or ''}".strip()
            return response

    return Watched()
