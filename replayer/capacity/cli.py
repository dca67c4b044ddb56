"""`llmreplay capacity`: flags from CapacityConfig and (for each step's replay) ReplayConfig's own fields.

Exit 0; 1 no step held the SLOs or --require-headroom not met; 2 bad input; 130 interrupted.
"""

from __future__ import annotations

import click

from llmreplay import options
from llmreplay.otlp.config import OtlpConfig
from replayer.capacity.config import REPLAY_FLAGS, CapacityConfig
from replayer.config import ReplayConfig

STEP_RUN_DIR = "-"  # each step's run directory is set by the search (replayer.capacity.step)


@click.command("capacity")
@click.argument("trace", type=click.Path())
@options.click_options(CapacityConfig)
@options.click_options(ReplayConfig, only=REPLAY_FLAGS)
@options.click_options(OtlpConfig)
@click.option("--json", "as_json", is_flag=True, help="Print capacity.json.")
@click.option(
    "--html",
    "html_path",
    type=click.Path(),
    help="Also write the report (points, curves, steps) as one HTML page.",
)
@click.option(
    "--junit",
    "junit_path",
    metavar="FILE",
    help="Write the search's gate as JUnit XML for CI: its verdict, headroom, SLOs and error rate at the "
    "SLO limit, and each step; a failure carries its reason.",
)
def capacity(trace, as_json, html_path, junit_path, **values):
    """Find how much of TRACE's own traffic --target holds within the SLOs: the knee, the SLO limit,
    the operating point and the headroom against the trace's busiest minute (DIR/capacity.json)."""
    from llmreplay.otlp.cli import otlp_config

    values["quiet"] = values["quiet"] or as_json
    otlp = otlp_config(values)  # checked now: a bad --otlp-endpoint is exit 2 before any step
    replay = options.build(ReplayConfig, values, trace_path=trace, run_dir=STEP_RUN_DIR)
    config = options.build(CapacityConfig, values, trace_path=trace, replay=replay)
    from llmreplay.output_paths import check_output_dir, check_output_file

    check_output_dir(config.out_dir, "-o")  # before any step runs
    for flag, path in (("--html", html_path), ("--junit", junit_path)):
        if path:
            check_output_file(path, force=True, flag=flag)
    _run(config, as_json, html_path, otlp, junit_path)


def _run(
    config: CapacityConfig,
    as_json: bool,
    html_path: str | None = None,
    otlp: OtlpConfig | None = None,
    junit_path: str | None = None,
) -> None:
    import orjson
    from rich.console import Console

    from replayer.capacity.runner import run_capacity
    from replayer.capacity.terminal import print_capacity, print_verdict

    console = Console(stderr=True)
    document = run_capacity(config, console)
    if html_path:
        from llmreplay.output_paths import write_atomic
        from replayer.capacity.html import render_capacity_html

        write_atomic(html_path, render_capacity_html(document), force=True, flag="--html")
    if junit_path:
        from llmreplay.compare_outputs import junit_of
        from llmreplay.output_paths import write_atomic
        from replayer.capacity.gate_cases import capacity_cases

        verdict = {"headline": document["verdict"]["line"], "exit_code": document["verdict"]["exit_code"]}
        write_atomic(junit_path, junit_of("capacity", verdict, capacity_cases(document)), force=True, flag="--junit")
    if as_json:
        click.echo(orjson.dumps(document, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY).decode())
        print_verdict(document, console)
    elif config.replay.quiet:
        print_verdict(document, Console())
    else:
        print_capacity(document, Console())
        click.echo(f"capacity written to {config.out_dir}/capacity.json")
    if document["stop_reason"] == "interrupted":
        click.echo(f"llmreplay: error: interrupted; the search so far is in {config.out_dir}", err=True)
    elif otlp is not None:
        _export_otlp(otlp, config, document)
    raise SystemExit(document["verdict"]["exit_code"])


def _export_otlp(otlp: OtlpConfig, config: CapacityConfig, document: dict) -> None:
    """--otlp-endpoint: every step's run sent after the search, named `<DIR>/<step>` in its run id (as the
    Prometheus pushes name it); a refusal is one warning."""
    from pathlib import Path

    from llmreplay.otlp.cli import export_after_runs

    out = Path(config.out_dir)
    steps = [step["run_dir"] for step in document.get("steps", []) if step.get("run_dir")]
    export_after_runs(
        otlp, [(out / step, f"{out.resolve().name}/{Path(step).name}") for step in steps], config.replay.quiet
    )
