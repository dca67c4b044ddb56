"""`llmreplay compare` and `llmreplay report`: parse flags into a CompareConfig, run, render, exit.

Exit 0 nothing regressed, 1 regression / SLO breach / unfaithful replay, 2 bad input (BadInput).
Heavy imports (numpy, pyarrow, rich) happen inside the commands so `--help` stays fast.
"""

from __future__ import annotations

import click

from llmreplay.errors import BadInput

SLO_HELP = "Per-request and percentile SLO, repeatable: ttft_p95<=500ms, tpot_p99<=50ms, e2e_p99<=20s."


def _common_options(command):
    options = [
        click.option("--slo", "slos", multiple=True, metavar="SLO", help=SLO_HELP),
        click.option("--json", "as_json", is_flag=True, help="Print the whole result as JSON (no table)."),
        click.option(
            "--html", "html_path", type=click.Path(dir_okay=False), help="Write a self-contained HTML report."
        ),
        click.option(
            "--max-dispatch-lag",
            metavar="DURATION",
            help="Fidelity limit on the replay's dispatch lag p99 (default 50ms).",
        ),
    ]
    for option in reversed(options):
        command = option(command)
    return command


@click.command()
@click.argument("baseline", type=click.Path())
@click.argument("candidate", type=click.Path())
@click.option(
    "--tolerance", metavar="PCT", help="Change a percentile may show before it counts (default 10%)."
)
@click.option(
    "--offset-ttft",
    metavar="DURATION",
    help="Subtract a measured network difference from the candidate's TTFT and E2E (e.g. 3ms).",
)
@_common_options
@click.pass_context
def compare(ctx, baseline, candidate, tolerance, offset_ttft, slos, as_json, html_path, max_dispatch_lag):
    """Compare CANDIDATE against BASELINE; each a replay run directory or a recorded trace.

    Verdict per metric percentile (bootstrap 95% CI) and per SLO; exit 1 on a regression,
    an SLO breach or an unfaithful replay, 2 on bad input.
    """
    from replayer.compare import compare_sides
    from replayer.compare_inputs import load_side

    config = _config(slos, tolerance, offset_ttft, max_dispatch_lag)
    result = compare_sides(load_side(baseline, "baseline"), load_side(candidate, "candidate"), config)
    _emit(result, as_json, html_path)
    ctx.exit(result["verdict"]["exit_code"])


@click.command()
@click.argument("run", type=click.Path())
@_common_options
@click.pass_context
def report(ctx, run, slos, as_json, html_path, max_dispatch_lag):
    """Report on one replay RUN directory (or a trace) without a baseline; exit 1 on an SLO breach."""
    from replayer.compare import summarize_side
    from replayer.compare_inputs import load_side

    config = _config(slos, None, None, max_dispatch_lag)
    result = summarize_side(load_side(run, "run"), config)
    _emit(result, as_json, html_path)
    ctx.exit(result["verdict"]["exit_code"])


def _config(slos, tolerance, offset_ttft, max_dispatch_lag):
    import dataclasses

    from replayer.compare import CompareConfig
    from replayer.compare_fidelity import FidelityLimits
    from replayer.compare_slo import parse_duration_ns, parse_slo

    changes: dict = {"slos": tuple(parse_slo(text) for text in slos)}
    if tolerance is not None:
        changes["tolerance"] = _parse_share(tolerance, "--tolerance")
    if offset_ttft is not None:
        changes["offset_ttft_ns"] = parse_duration_ns(offset_ttft, "--offset-ttft", allow_negative=True)
    if max_dispatch_lag is not None:
        lag_ms = parse_duration_ns(max_dispatch_lag, "--max-dispatch-lag") / 1e6
        changes["limits"] = dataclasses.replace(FidelityLimits(), max_dispatch_lag_p99_ms=lag_ms)
    return dataclasses.replace(CompareConfig(), **changes)


def _parse_share(text: str, where: str) -> float:
    """'10%' or '0.1' -> 0.1."""
    raw = text.strip()
    try:
        value = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
    except ValueError:
        raise BadInput(f"{where}: {text!r} is not a share (write 10% or 0.1)") from None
    if not 0 <= value < 1:
        raise BadInput(f"{where}: {text!r} must be between 0% and 100% (write 10% or 0.1)")
    return value


def _emit(result: dict, as_json: bool, html_path: str | None) -> None:
    if html_path:
        from replayer.report_html import write_html

        write_html(result, html_path)
    if as_json:
        import json

        click.echo(json.dumps(_finite(result), indent=2, allow_nan=False, default=str))
    else:
        import sys

        from rich.console import Console

        from replayer.report_terminal import render_terminal

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
