"""The `llmreplay import` command: parse flags, build an ImportConfig, report what was imported and skipped."""

from __future__ import annotations

from pathlib import Path

import click

from llmreplay.importers import BY_NAME


@click.command("import")
@click.argument("source", type=click.Choice(tuple(BY_NAME)))
@click.argument("file", type=click.Path(path_type=Path, dir_okay=False))
@click.option(
    "-o", "--out", "output", required=True, type=click.Path(path_type=Path), help="Trace file to write."
)
@click.option("--force", is_flag=True, help="Replace the output file if it exists.")
@click.option(
    "--block-size",
    type=int,
    default=None,
    help="Tokens per hash id block (mooncake: the file's block size; ragpulse: size of the derived "
    "blocks) [default: 512].",
)
@click.option("--quiet", is_flag=True, help="Print nothing on success (skipped rows are still reported).")
def import_trace(source: str, file: Path, output: Path, force: bool, block_size: int | None, quiet: bool):
    """Convert a public LLM serving trace (Mooncake, Azure, BurstGPT, RAGPulse) into a shape trace.

    Rows the source marks as failed (0 in / 0 out) or without a timestamp are skipped and reported.
    """
    from llmreplay.importers.pipeline import ImportConfig, import_trace_file

    config = ImportConfig(
        source=source, input_path=file, output_path=output, force=force, block_size=block_size
    )
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
        click.echo(
            f"imported {summary.requests} of {summary.rows_read} rows{sessions} from {file} -> {output}"
        )
