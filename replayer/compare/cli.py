"""`llmreplay compare` and `llmreplay report`: parse flags into a CompareConfig, run, render, exit.

Exit 0 nothing failed; 1 a latency or error-rate regression, an error rate over --max-error-rate, an
SLO breach, an unfaithful or interrupted replay, sides at different load (unless
--allow-different-load), an inconclusive cell under --fail-on-inconclusive; 2 bad input (BadInput).
Heavy imports (numpy, pyarrow, rich) happen inside the commands so `--help` stays fast.
"""

from __future__ import annotations

import click

from replayer.compare import gate_options

SLO_HELP = "Per-request and percentile SLO, repeatable: ttft_p95<=500ms, tpot_p99<=50ms, e2e_p99<=20s."


def _common_options(command):
    options = [
        click.option("--slo", "slos", multiple=True, metavar="SLO", help=SLO_HELP),
        click.option("--json", "as_json", is_flag=True, help="Print the whole result as JSON (no table)."),
        click.option(
            "--html", "html_path", type=click.Path(dir_okay=False), help="Write a self-contained HTML report."
        ),
    ]
    for option in reversed(options):
        command = option(command)
    return gate_options.gate_options(command)


@click.command()
@click.argument("baseline", type=click.Path())
@click.argument("candidate", type=click.Path())
@click.option(
    "--tolerance", metavar="PCT", help="Change a percentile may show before it counts (default 10%)."
)
@click.option(
    "--error-rate-tolerance",
    metavar="PCT",
    help="Error-rate increase over the baseline's that a significant rise must exceed to fail "
    "(default 1 point: 1%).",
)
@click.option(
    "--offset-ttft",
    metavar="DURATION",
    help="Subtract a measured network difference from the candidate's TTFT and E2E (e.g. 3ms).",
)
@click.option(
    "--allow-different-load",
    is_flag=True,
    help="Judge latency even when the sides ran at different --speed/--scale (refused by default, exit 1).",
)
@click.option(
    "--fail-on-inconclusive",
    is_flag=True,
    help="A strict gate: an inconclusive latency or error-rate verdict fails too (exit 1).",
)
@_common_options
@click.pass_context
def compare(ctx, baseline, candidate, **flags):
    """Compare CANDIDATE against BASELINE; each a replay run directory or a recorded trace.

    One headline first, then per metric percentile a paired-bootstrap CI and verdict, SLOs, errors,
    fidelity. Exit 1 when the gate fails (see docs/howto-gate-ci.md), 2 on bad input.
    """
    from replayer.compare.inputs import load_side
    from replayer.compare.sides import compare_sides

    config = _config(**flags)
    result = compare_sides(load_side(baseline, "baseline"), load_side(candidate, "candidate"), config)
    _emit(result, flags["as_json"], flags["html_path"])
    ctx.exit(result["verdict"]["exit_code"])


@click.command()
@click.argument("run", type=click.Path())
@_common_options
@click.pass_context
def report(ctx, run, **flags):
    """Report on one replay RUN directory (or a trace) without a baseline.

    Exit 1 when the run was interrupted or unfaithful, its error rate is over --max-error-rate, or
    an SLO is breached; 2 on bad input.
    """
    from replayer.compare.inputs import load_side
    from replayer.compare.sides import summarize_side

    config = _config(**flags)
    result = summarize_side(load_side(run, "run"), config)
    _emit(result, flags["as_json"], flags["html_path"])
    ctx.exit(result["verdict"]["exit_code"])


def _config(
    slos,
    max_dispatch_lag,
    max_error_rate,
    tolerance=None,
    error_rate_tolerance=None,
    offset_ttft=None,
    allow_different_load=False,
    fail_on_inconclusive=False,
    **_,
):
    import dataclasses

    from llmreplay.durations import parse_duration_ns
    from replayer.compare.sides import CompareConfig
    from replayer.compare.slo import parse_slo

    changes: dict = {
        "slos": tuple(parse_slo(text) for text in slos),
        "allow_different_load": allow_different_load,
        "fail_on_inconclusive": fail_on_inconclusive,
    }
    if tolerance is not None:
        changes["tolerance"] = gate_options.parse_share(tolerance, "--tolerance")
    if error_rate_tolerance is not None:
        changes["error_rate_tolerance"] = gate_options.parse_share(
            error_rate_tolerance, "--error-rate-tolerance"
        )
    if offset_ttft is not None:
        changes["offset_ttft_ns"] = parse_duration_ns(
            offset_ttft, "--offset-ttft", allow_negative=True, allow_zero=True, bare_unit=None
        )
    if max_dispatch_lag is not None:
        changes["limits"] = dataclasses.replace(
            CompareConfig().limits, max_dispatch_lag_p99_ns=gate_options.dispatch_lag_ns(max_dispatch_lag)
        )
    if max_error_rate is not None:
        changes["max_error_rate"] = gate_options.error_rate(max_error_rate)
    return dataclasses.replace(CompareConfig(), **changes)


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
