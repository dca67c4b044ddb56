"""The OTLP flags of `export otlp`, `replay` and `capacity`, declared once; checked where they enter.

Light (no OpenTelemetry, no click): the endpoint must be usable before a run starts, or exit 2.
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass

from llmreplay.errors import BadInput
from llmreplay.http_headers import parse_env_headers
from llmreplay.options import duration_s, http_url, option

INSTALL_HINT = "pip install 'llmreplay[otel]'"


def parse_endpoint(text: str, flag: str) -> str:
    """A collector's base URL (the SDK's OTEL_EXPORTER_OTLP_ENDPOINT): /v1/metrics and /v1/traces go after it.
    No query or fragment: a key there would be printed; it belongs in a header."""
    parts = http_url(text, flag)
    if parts.query or parts.fragment:
        raise BadInput(
            f"{flag}: the URL holds a query or fragment, which messages would show; pass credentials with "
            "--otlp-header-from-env NAME:ENV"
        )
    if parts.path.rstrip("/").endswith(("/v1/metrics", "/v1/traces")):
        raise BadInput(
            f"{flag} {text!r}: give the collector's base URL (e.g. http://HOST:4318), not a signal path"
        )
    return urllib.parse.urlunsplit(parts._replace(path=parts.path.rstrip("/")))


@dataclass(frozen=True, slots=True)
class OtlpConfig:
    """Where and what to send; header values are secrets and never reach a message, a file or an attribute.
    Fields are `otlp_*`: click names each option after its field, beside ReplayConfig's own in one command."""

    otlp_endpoint: str | None = option(
        None,
        flags=("--otlp-endpoint",),
        metavar="URL",
        parse=parse_endpoint,
        help="After the run, send its metrics (GenAI semantic conventions) and one span per request by "
        "OTLP/HTTP to this collector base URL (URL/v1/metrics, URL/v1/traces). Off unless given.",
    )
    otlp_headers: tuple[tuple[str, str], ...] = option(
        (),
        flags=("--otlp-header-from-env",),
        multiple=True,
        parse=parse_env_headers,
        repr=False,
        metavar="NAME:ENV",
        help="Header NAME sent to the collector, its value the environment variable ENV (repeatable; e.g. "
        "Authorization:OTLP_AUTH). OTEL_EXPORTER_OTLP_HEADERS applies too; a header given here wins.",
    )
    otlp_metrics: bool = option(
        True,
        flags=("--otlp-metrics/--no-otlp-metrics",),
        type=bool,
        help="Send the GenAI metrics (--no-otlp-metrics: spans only, e.g. to Jaeger).",
    )
    otlp_spans: bool = option(
        True,
        flags=("--otlp-spans/--no-otlp-spans",),
        type=bool,
        help="Send one span per request, start and end as sent and answered (--no-otlp-spans: metrics "
        "only, e.g. to Prometheus's OTLP receiver).",
    )
    otlp_timeout_s: float = option(
        10.0,
        flags=("--otlp-timeout",),
        help="Give up on a collector after this long per request sent to it (retries included).",
        **duration_s(),
    )
    otlp_step_s: float | None = option(
        None,
        flags=("--otlp-step",),
        help="Time between metric points (cumulative histograms over the run's own wall-clock time); "
        "default 10s, coarser when a run would need more than 720 points a series.",
        **duration_s(),
    )

    @property
    def enabled(self) -> bool:
        return self.otlp_endpoint is not None and (self.otlp_metrics or self.otlp_spans)

    @property
    def endpoint(self) -> str | None:
        return self.otlp_endpoint
