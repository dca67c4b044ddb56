"""`llmreplay compare` and `llmreplay report`: flags built from CompareConfig's fields; run, render, exit.

Exit 0 nothing failed; 1 a latency or error-rate regression, an error rate over --max-error-rate, an
SLO breach, an unfaithful or interrupted replay, sides at different load (unless
--allow-different-load), an inconclusive cell under --fail-on-inconclusive; 2 bad input (BadInput).
"""

from __future__ import annotations

import click

from llmreplay import options
from replayer.compare.config import REPORT_FIELDS, CompareConfig


def _output_options(command):
    command = click.option(
        "--csv",
        "csv_path",
        metavar="FILE",
        help="Write the gate's cases (fidelity checks, latency cells, SLOs, error checks) as CSV.",
    )(command)
    command = click.option(
        "--junit",
        "junit_path",
        metavar="FILE",
        help="Write the gate as JUnit XML for CI: a test case per check, cell and SLO; failures carry the reason.",
    )(command)
    command = click.option("--html", "html_path", metavar="FILE", help="Write a self-contained HTML report.")(
        command
    )
    return click.option(
        "--json",
        "as_json",
        is_flag=True,
        help="Print the whole result as JSON (no table): format llmreplay.compare, docs/compare-format.md.",
    )(command)


def _check_outputs(outputs: dict) -> None:
    """Every file output may be written, before any work (llmreplay.output_paths)."""
    from llmreplay.output_paths import check_output_file

    for flag, path in outputs.items():
        if path:
            check_output_file(path, force=True, flag=flag)


@click.command()
@click.argument("baseline", type=click.Path())
@click.argument("candidate", type=click.Path())
@options.click_options(CompareConfig)
@_output_options
def compare(baseline, candidate, as_json, html_path, junit_path, csv_path, **values):
    """Compare CANDIDATE against BASELINE; each a replay run directory or a recorded trace.

    One headline first, then per metric percentile a paired-bootstrap CI and verdict, SLOs, errors,
    fidelity. Exit 1 when the gate fails (see docs/howto-gate-ci.md), 2 on bad input.
    """
    from replayer.compare.sides import compare_sides
    from replayer.measured.side import load_side

    config = options.build(CompareConfig, values)
    outputs = {"--html": html_path, "--junit": junit_path, "--csv": csv_path}
    _check_outputs(outputs)
    result = compare_sides(load_side(baseline, "baseline"), load_side(candidate, "candidate"), config)
    _emit(result, as_json, outputs)
    raise SystemExit(result["verdict"]["exit_code"])


@click.command()
@click.argument("run", type=click.Path())
@options.click_options(CompareConfig, only=REPORT_FIELDS)
@_output_options
def report(run, as_json, html_path, junit_path, csv_path, **values):
    """Report on one replay RUN directory (or a trace) without a baseline.

    Exit 1 when the run was interrupted or unfaithful, its error rate is over --max-error-rate, or
    an SLO is breached; 2 on bad input.
    """
    from replayer.compare.sides import summarize_side
    from replayer.measured.side import load_side

    config = options.build(CompareConfig, values)
    outputs = {"--html": html_path, "--junit": junit_path, "--csv": csv_path}
    _check_outputs(outputs)
    result = summarize_side(load_side(run, "run"), config)
    _emit(result, as_json, outputs)
    raise SystemExit(result["verdict"]["exit_code"])


def _emit(result: dict, as_json: bool, outputs: dict) -> None:
    html_path = outputs.get("--html")
    if html_path:
        from llmreplay.output_paths import write_atomic
        from replayer.report.html import render_html

        write_atomic(html_path, render_html(result), force=True, flag="--html")  # checked, atomic
    if outputs.get("--junit"):
        from llmreplay.compare_outputs import write_junit

        write_junit(outputs["--junit"], result)
    if outputs.get("--csv"):
        from llmreplay.compare_outputs import write_verdict_csv

        write_verdict_csv(outputs["--csv"], result)
    if as_json:
        from llmreplay.compare_format import dumps

        click.echo(dumps(result))
    else:
        import sys

        from rich.console import Console

        from replayer.report.terminal import render_terminal

        console = Console(width=None if sys.stdout.isatty() else 140)
        render_terminal(result, console)
        for flag, what in (("--html", "HTML report"), ("--junit", "JUnit XML"), ("--csv", "gate cases CSV")):
            if outputs.get(flag):
                console.print(f"{what}: {outputs[flag]}")
