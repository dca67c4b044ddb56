"""The Prometheus flags, declared once: `replay` and `capacity` (nested in ReplayConfig as `observe`) take
them all, `export prometheus` the push ones (PUSH_FLAGS).

Light (no prometheus_client, no click): the workers import ReplayConfig, and with it this.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from llmreplay.errors import BadInput
from llmreplay.http_headers import parse_env_headers
from llmreplay.options import option, url

LOOPBACK = "127.0.0.1"
PUSH_FLAGS = frozenset({"pushgateway", "remote_write", "push_headers"})


def _bind_address(text: str, flag: str) -> str:
    try:
        return str(ipaddress.ip_address(text.strip().strip("[]")))
    except ValueError:
        raise BadInput(
            f"{flag} {text!r}: expected an IP address to listen on, e.g. 127.0.0.1 or 0.0.0.0"
        ) from None


@dataclass(frozen=True, slots=True)
class ObserveConfig:
    """Where a run's figures go besides its own files; header values never reach a file or a label."""

    metrics_port: int | None = option(
        None,
        type=int,
        int_range=(0, 65535),
        metavar="PORT",
        help="Serve live progress in Prometheus text format at http://--metrics-bind:PORT/metrics "
        "during the run (0: a free port, printed).",
    )
    metrics_bind: str = option(
        LOOPBACK,
        metavar="ADDRESS",
        parse=_bind_address,
        help="Address --metrics-port listens on (0.0.0.0 for a Prometheus on another host).",
    )
    pushgateway: str | None = option(
        None, help="After the run, push its figures to this Prometheus Pushgateway.", **url()
    )
    remote_write: str | None = option(
        None,
        help="After the run, send its figures by Prometheus remote-write 1.0 to this URL "
        "(e.g. http://prometheus:9090/api/v1/write).",
        **url(),
    )
    push_headers: tuple[tuple[str, str], ...] = option(
        (),
        flags=("--push-header-from-env",),
        multiple=True,
        parse=parse_env_headers,
        repr=False,
        metavar="NAME:ENV",
        help="Header NAME sent with --pushgateway/--remote-write, its value the environment variable ENV "
        "(repeatable; e.g. Authorization:PROM_AUTH).",
    )
    run_label: str | None = None  # the `run` label; None: the run directory's name (capacity sets its own)

    @property
    def pushes(self) -> bool:
        return self.pushgateway is not None or self.remote_write is not None

    def public_dict(self) -> dict:
        """For run.json: the push headers' names only."""
        return {
            "metrics_port": self.metrics_port,
            "metrics_bind": self.metrics_bind,
            "pushgateway": self.pushgateway,
            "remote_write": self.remote_write,
            "push_headers": sorted({name for name, _ in self.push_headers}),
        }
