"""`llmreplay export prometheus RUN --pushgateway URL | --remote-write URL`: a run already on disk sent as
`replay` sends it after the run. A target that refuses is one line each and exit 1; no header is printed."""

from __future__ import annotations

from pathlib import Path

import click

from llmreplay import options
from llmreplay.errors import BadInput
from llmreplay.prometheus.config import PUSH_FLAGS, ObserveConfig


def push_config(values: dict) -> ObserveConfig:
    """The push flags from click's values (their keys taken out of them)."""
    return options.build(ObserveConfig, {name: values.pop(name, None) for name in PUSH_FLAGS})


def export_prometheus(run: Path, config: ObserveConfig) -> None:
    from llmreplay.prometheus.push import push_run

    if not config.pushes:
        raise BadInput("export prometheus: give --pushgateway URL and/or --remote-write URL")
    failed = push_run(run, config)
    for line in failed:
        click.echo(f"llmreplay: {line.replace('warning: ', 'error: ', 1)}", err=True)
    if failed:
        raise SystemExit(1)
    sent = [
        flag
        for flag, url in (("Pushgateway", config.pushgateway), ("remote-write", config.remote_write))
        if url
    ]
    click.echo(f"sent {run}'s figures by {' and '.join(sent)}")
