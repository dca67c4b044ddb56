"""`llmreplay import`: flags built from ImportConfig's fields; reports what was imported and skipped."""

from __future__ import annotations

from pathlib import Path

import click

from llmreplay import options
from llmreplay.importers import BY_NAME
from llmreplay.importers.config import ImportConfig


@click.command("import")
@click.argument("source", type=click.Choice(tuple(BY_NAME)))
@click.argument("file", metavar="FILE|DIR", type=click.Path(path_type=Path))
@options.click_options(ImportConfig)
@click.option("--quiet", is_flag=True, help="Print nothing on success (skipped rows are still reported).")
def import_trace(source: str, file: Path, quiet: bool, **values):
    """Convert a public LLM serving trace (Mooncake, Azure, BurstGPT, RAGPulse) or gateway telemetry
    (OpenTelemetry GenAI spans in OTLP JSON files: a file or a directory) into a shape trace.

    Rows the source marks as failed (0 in / 0 out) or without a timestamp are skipped and reported.
    """
    from llmreplay.importers.pipeline import import_trace_file

    if file.is_dir() and not BY_NAME[source].directories:
        raise click.BadParameter(f"{file}: is a directory ({source} reads one file)", param_hint="'FILE|DIR'")
    config = options.build(ImportConfig, values, source=source, input_path=file)
    summary = import_trace_file(config)
    if summary.skipped_line:
        click.echo(f"llmreplay import: {summary.skipped_line}", err=True)
    if summary.reordered_rows:
        click.echo(
            f"llmreplay import: {summary.reordered_rows} rows were out of arrival order in {file.name}; "
            "sorted by arrival (stable)",
            err=True,
        )
    if not quiet:
        sessions = f", {summary.sessions} sessions" if summary.sessions else ""
        where = f"from {file} -> {config.output_path}"
        unit = BY_NAME[source].unit
        click.echo(f"imported {summary.requests} of {summary.rows_read} {unit}{sessions} {where}")
        click.echo(f"prefix sharing: {summary.meta.extra['prefix_hashes']}")
        if "not_in_source" in summary.meta.extra:
            click.echo(f"not in the source: {summary.meta.extra['not_in_source']}")
        for note in summary.meta.extra.get("notes", ()):
            click.echo(note)
