"""The OTLP export as the commands use it: `export otlp RUN`, and after `replay`/`capacity` have written
their runs. A collector that refuses is one line (an error for `export otlp`, exit 1; a warning after a
run, whose exit status stays the run's). No header value is ever printed.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import click

from llmreplay import options
from llmreplay.errors import BadInput, first_line
from llmreplay.otlp.config import OtlpConfig

OTLP_FLAGS = frozenset(item.name for item in options.declared(OtlpConfig))


def otlp_config(values: dict) -> OtlpConfig:
    """OtlpConfig from click's values (its keys taken out of them); the SDK checked when it will be used."""
    config = options.build(OtlpConfig, {name: values.pop(name, None) for name in OTLP_FLAGS})
    if config.enabled:
        from llmreplay.otlp.send import require_sdk

        require_sdk()
    return config


def export_otlp(run: Path, config: OtlpConfig) -> None:
    """`llmreplay export otlp RUN --otlp-endpoint URL`: exit 1 when the collector refuses."""
    from llmreplay.otlp.send import OtlpExportFailed, export_run

    if config.otlp_endpoint is None:
        raise BadInput("export otlp: --otlp-endpoint URL is required (the collector's OTLP/HTTP base URL)")
    if not config.enabled:
        raise BadInput("export otlp: --no-otlp-metrics and --no-otlp-spans leave nothing to send")
    try:
        report = export_run(config, run)
    except OtlpExportFailed as exc:
        click.echo(f"llmreplay: error: OTLP export to {config.endpoint} failed: {exc}", err=True)
        raise SystemExit(1) from None
    click.echo(_sent_line(report, config))


def export_after_runs(
    config: OtlpConfig, runs: Iterable[tuple[Path, str | None]], quiet: bool = False
) -> None:
    """After a replay or a capacity search: each finished run (its path, and its name in the run id; None:
    the directory's) sent; at the first refusal one warning, and stop."""
    from llmreplay.otlp.send import OtlpExportFailed, export_run

    if not config.enabled:
        return
    for run, name in runs:
        try:
            report = export_run(config, run, name)
        except Exception as exc:  # noqa: BLE001 (after a run, fail open: the run on disk decides the exit status)
            reason = (
                str(exc)
                if isinstance(exc, OtlpExportFailed | BadInput)
                else f"{type(exc).__name__}: {first_line(exc)}"
            )
            click.echo(
                f"llmreplay: warning: OTLP export to {config.endpoint} failed: {reason}; the run is complete in "
                f"{run} (send it again with `llmreplay export otlp {run} --otlp-endpoint {config.endpoint}`)",
                err=True,
            )
            return
        if not quiet:
            click.echo(_sent_line(report, config), err=True)


def _sent_line(report, config: OtlpConfig) -> str:
    sent = [f"{report.metric_points} metric points"] if config.otlp_metrics else []
    sent += [f"{report.spans} spans"] if config.otlp_spans else []
    unsent = f"; {report.not_sent} never sent, in neither" if report.not_sent else ""
    return (
        f"OTLP: sent run {report.run_id} ({report.requests} requests{unsent}) to {config.endpoint}: "
        f"{', '.join(sent)}"
    )
