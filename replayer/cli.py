"""`llmreplay replay`: the flags are built from ReplayConfig's fields; the command fills one and hands it on.

Heavy imports (the coordinator, rich, orjson) happen inside the command so `--help` stays fast.
"""

from __future__ import annotations

import math

import click

from llmreplay import options
from llmreplay.errors import BadInput
from llmreplay.otlp.config import OtlpConfig
from replayer.config import ReplayConfig


def _legacy_lag_bound(values: dict) -> None:
    """--lag-bound-ms, the old spelling of --max-dispatch-lag in milliseconds, as that flag's value."""
    legacy_ms = values.pop("lag_bound_ms")
    if legacy_ms is None or values["max_dispatch_lag_p99_ns"] is not None:
        return
    if not (math.isfinite(legacy_ms) and legacy_ms > 0):
        raise BadInput(f"--lag-bound-ms {legacy_ms}: must be a finite number greater than 0")
    values["max_dispatch_lag_p99_ns"] = f"{legacy_ms!r}ms"


@click.command("replay")
@click.argument("trace", type=click.Path())
@options.click_options(ReplayConfig)
@options.click_options(OtlpConfig)
@click.option("--lag-bound-ms", type=float, hidden=True)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def replay(trace, as_json, **values):
    """Replay TRACE open-loop against --target and write results to RUN_DIR.

    Ends with a one-line verdict; exit 1 when the replay was unfaithful (requests not sent,
    dispatch lag over --max-dispatch-lag, lengths off) or more than --max-error-rate of its requests
    failed: the checks `llmreplay report` makes of the run.
    """
    from llmreplay.otlp.cli import otlp_config
    from llmreplay.output_paths import check_output_dir

    _legacy_lag_bound(values)
    values["quiet"] = values["quiet"] or as_json
    otlp = otlp_config(values)  # checked now: a bad --otlp-endpoint is exit 2 before the run
    config = options.build(ReplayConfig, values, trace_path=trace)
    check_output_dir(config.run_dir, "-o")
    if config.multihost.ray_address is not None:
        _run_on_ray(config, as_json, otlp)
    _run(config, as_json, otlp)


def _export_otlp(otlp: OtlpConfig, run_dir, quiet: bool) -> None:
    """--otlp-endpoint: the finished run sent to the collector, after the timed loop (a refusal: one warning)."""
    from pathlib import Path

    from llmreplay.otlp.cli import export_after_runs

    export_after_runs(otlp, [(Path(run_dir), None)], quiet)


def _run_on_ray(config, as_json: bool, otlp: OtlpConfig) -> None:
    """--ray: the same replay, one shard a Ray node, merged here (replayer.launch.ray_launcher)."""
    import json
    import sys

    from rich.console import Console

    from replayer.launch.ray_launcher import replay_on_ray
    from replayer.results.summary import print_verdict

    if "replay" not in sys.argv:
        raise BadInput("--ray: run it as `llmreplay replay ... --ray ADDRESS` (the shards get its arguments)")
    argv = sys.argv[sys.argv.index("replay") + 1 :]
    console = Console(stderr=True)
    exit_code, out, summary = replay_on_ray(config, argv, console)
    if as_json:
        click.echo(json.dumps(summary, indent=2))
    print_verdict(summary, console if as_json else Console())
    click.echo(f"merged run of {config.multihost.shards} Ray nodes written to {out}")
    _export_otlp(otlp, out, config.quiet)
    raise SystemExit(exit_code)


def _run(config, as_json: bool, otlp: OtlpConfig) -> None:
    import orjson
    from rich.console import Console

    from replayer.coordinator import run_replay
    from replayer.results.summary import print_summary, print_verdict

    console = Console(stderr=True)
    outcome = run_replay(config, console)
    if as_json:
        click.echo(
            orjson.dumps(outcome.summary, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY).decode()
        )
        print_verdict(outcome.summary, console)  # on stderr: stdout stays pure JSON
    elif config.quiet:
        print_verdict(outcome.summary, Console())  # --quiet: the one-line verdict, nothing else
    else:
        print_summary(outcome.summary, Console())
        click.echo(f"run written to {outcome.run_dir}")
    if outcome.summary.get("stop_reason") == "interrupted":
        click.echo(f"llmreplay: error: interrupted; the run so far is in {outcome.run_dir}", err=True)
        raise SystemExit(130)  # Ctrl-C: the shell's convention, whatever the verdict
    _export_otlp(otlp, outcome.run_dir, config.quiet)
    raise SystemExit(outcome.exit_code)
