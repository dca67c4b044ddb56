"""`llmreplay replay`: parse and check the flags, build a ReplayConfig, hand it to the coordinator.

Defaults live in replayer.config only; a flag that is not given leaves the default alone.
"""

from __future__ import annotations

import click

from llmreplay.errors import BadInput
from replayer.config import ENGINES, NS_PER_S


def _ns(seconds: float | None, flag: str, allow_zero: bool = False) -> int | None:
    if seconds is None:
        return None
    if seconds < 0 or (seconds == 0 and not allow_zero):
        raise BadInput(f"{flag} {seconds}: must be {'>= 0' if allow_zero else '> 0'} seconds")
    return round(seconds * NS_PER_S)


def _header(value: str) -> tuple[str, str]:
    name, sep, rest = value.partition(":")
    if not sep or not name.strip():
        raise BadInput(
            f"--header: expected NAME:VALUE, got a value without a name or colon (name {name.strip()!r})"
        )
    return name.strip(), rest.strip()


def _given(**values) -> dict:
    return {k: v for k, v in values.items() if v is not None}


@click.command("replay")
@click.argument("trace", type=click.Path())
@click.option(
    "--target", required=True, help="Base URL of the OpenAI-compatible engine, e.g. http://127.0.0.1:8000"
)
@click.option("-o", "--out", "run_dir", required=True, type=click.Path(), help="Run directory to create.")
@click.option("--speed", type=float, help="Time factor: 2 sends twice as fast. [1]")
@click.option(
    "--scale", type=float, help="Load factor on sessions: 0.5 keeps half, 2 adds a copy of each. [1]"
)
@click.option("--seed", type=int, help="Seed of --scale sampling, copy jitter and copy nonces. [0]")
@click.option(
    "--copy-jitter", "copy_jitter_s", type=float, help="Bound of the seeded shift of --scale copies, s. [1]"
)
@click.option("--from", "from_s", type=float, help="Start of the trace window, s from its first request.")
@click.option("--to", "to_s", type=float, help="End of the trace window, s from its first request.")
@click.option("--limit", type=int, help="Send at most N trace rows.")
@click.option(
    "--max-idle-gap", "max_idle_gap_s", type=float, help="Cut idle stretches longer than this many s."
)
@click.option("--no-cancellations", is_flag=True, help="Do not mirror production client disconnects.")
@click.option("--workers", type=int, help="Processes, each owning a shard of the sessions. [1]")
@click.option("--max-inflight", type=int, help="Cap on open requests; above it requests are shed. [10000]")
@click.option("--duration", "duration_s", type=float, help="Stop sending after this many s.")
@click.option(
    "--grace", "grace_s", type=float, help="After a stop, wait this long for in-flight requests, s. [30]"
)
@click.option("--engine", type=click.Choice(ENGINES), help="Fields that force output length. [detect]")
@click.option("--model", help="Model name to send, overriding the trace's.")
@click.option("--session-header", help="Send the session id in this header (e.g. X-Session-Affinity).")
@click.option(
    "--header", "headers", multiple=True, help="Extra header NAME:VALUE (repeatable; values never logged)."
)
@click.option(
    "--api-key",
    envvar=["LLMREPLAY_API_KEY", "OPENAI_API_KEY"],
    help="Bearer token (or env LLMREPLAY_API_KEY / OPENAI_API_KEY); never written anywhere.",
)
@click.option("--tokenizer", help="Tokenizer for synthesized prompts and missing usage. [mistral-tekken]")
@click.option("--connect-timeout", "connect_timeout_s", type=float, help="TCP connect timeout, s. [30]")
@click.option(
    "--read-timeout", "read_timeout_s", type=float, help="Longest silence within one response, s. [600]"
)
@click.option(
    "--server-metrics", "server_metrics_url", help="Prometheus URL to scrape every second during the run."
)
@click.option(
    "--lag-bound-ms", type=float, help="Dispatch lag p99 above this marks the replay unfaithful (exit 1). [5]"
)
@click.option("--quiet", is_flag=True, help="No progress display.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def replay(trace, target, run_dir, **opts):
    """Replay TRACE open-loop against --target and write results to RUN_DIR."""
    from replayer.config import ReplayConfig, ScheduleConfig

    schedule = ScheduleConfig(
        **_given(
            speed=opts["speed"],
            scale=opts["scale"],
            seed=opts["seed"],
            copy_jitter_ns=_ns(opts["copy_jitter_s"], "--copy-jitter", allow_zero=True),
            from_offset_ns=_ns(opts["from_s"], "--from", allow_zero=True),
            to_offset_ns=_ns(opts["to_s"], "--to"),
            limit=opts["limit"],
            max_idle_gap_ns=_ns(opts["max_idle_gap_s"], "--max-idle-gap", allow_zero=True),
            cancellations=False if opts["no_cancellations"] else None,
        )
    )
    config = ReplayConfig(
        trace_path=trace,
        target_url=target,
        run_dir=run_dir,
        schedule=schedule,
        headers=tuple(_header(h) for h in opts["headers"]),
        **_given(
            workers=opts["workers"],
            max_inflight=opts["max_inflight"],
            duration_ns=_ns(opts["duration_s"], "--duration"),
            grace_ns=_ns(opts["grace_s"], "--grace", allow_zero=True),
            engine=opts["engine"],
            model=opts["model"],
            session_header=opts["session_header"],
            api_key=opts["api_key"] or None,
            tokenizer=opts["tokenizer"],
            connect_timeout_ns=_ns(opts["connect_timeout_s"], "--connect-timeout"),
            read_timeout_ns=_ns(opts["read_timeout_s"], "--read-timeout"),
            server_metrics_url=opts["server_metrics_url"],
            lag_bound_ns=None if opts["lag_bound_ms"] is None else round(opts["lag_bound_ms"] * 1e6),
            quiet=opts["quiet"] or opts["as_json"],
        ),
    )
    _run(config, opts["as_json"])


def _run(config, as_json: bool) -> None:
    import orjson
    from rich.console import Console

    from replayer.coordinator import run_replay
    from replayer.summary import print_summary

    console = Console(stderr=True)
    outcome = run_replay(config, console)
    if as_json:
        click.echo(
            orjson.dumps(outcome.summary, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY).decode()
        )
    elif not config.quiet:
        print_summary(outcome.summary, Console())
        click.echo(f"run written to {outcome.run_dir}")
    raise SystemExit(outcome.exit_code)
