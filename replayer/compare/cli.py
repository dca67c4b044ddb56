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
    command = click.option("--html", "html_path", metavar="FILE", help="Write a self-contained HTML report.")(
        command
    )
    return click.option("--json", "as_json", is_flag=True, help="Print the whole result as JSON (no table).")(
        command
    )


@click.command()
@click.argument("baseline", type=click.Path())
@click.argument("candidate", type=click.Path())
@options.click_options(CompareConfig)
@_output_options
def compare(baseline, candidate, as_json, html_path, **values):
    """Compare CANDIDATE against BASELINE; each a replay run directory or a recorded trace.

    One headline first, then per metric percentile a paired-bootstrap CI and verdict, SLOs, errors,
    fidelity. Exit 1 when the gate fails (see docs/howto-gate-ci.md), 2 on bad input.
    """
    from replayer.compare.inputs import load_side
    from replayer.compare.sides import compare_sides

    config = options.build(CompareConfig, values)
    result = compare_sides(load_side(baseline, "baseline"), load_side(candidate, "candidate"), config)
    _emit(result, as_json, html_path)
    raise SystemExit(result["verdict"]["exit_code"])


@click.command()
@click.argument("run", type=click.Path())
@options.click_options(CompareConfig, only=REPORT_FIELDS)
@_output_options
def report(run, as_json, html_path, **values):
    """Report on one replay RUN directory (or a trace) without a baseline.

    Exit 1 when the run was interrupted or unfaithful, its error rate is over --max-error-rate, or
    an SLO is breached; 2 on bad input.
    """
    from replayer.compare.inputs import load_side
    from replayer.compare.sides import summarize_side

    config = options.build(CompareConfig, values)
    result = summarize_side(load_side(run, "run"), config)
    _emit(result, as_json, html_path)
    raise SystemExit(result["verdict"]["exit_code"])


def _emit(result: dict, as_json: bool, html_path: str | None) -> None:
    if html_path:
        from llmreplay.output_paths import write_atomic
        from replayer.report.html import render_html

        write_atomic(html_path, render_html(result), force=True, flag="--html")  # checked, atomic
    if as_json:
        import json

        click.echo(json.dumps(_finite(result), indent=2, allow_nan=False, default=str))
    else:
        import sys

        from rich.console import Console

        from replayer.report.terminal import render_terminal

        console = Console(width=None if sys.stdout.isatty() else 140)
        render_terminal(result, console)
        if html_path:
            console.print(f"HTML report: {html_path}")


def _finite(value):
    """NaN and infinities become null: JSON has no spelling for them."""
    if isinstance(value, float):
        return value if value == value and abs(value) != float("inf") else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value
