"""`llmreplay replay`: parse and check the flags, build a ReplayConfig, hand it to the coordinator.

Defaults live in replayer.config only; a flag that is not given leaves the default alone.
"""

from __future__ import annotations

import math
import urllib.parse

import click

from llmreplay.durations import parse_duration_ns
from llmreplay.errors import BadInput
from replayer.compare import gate_options
from replayer.config import ENGINES

DURATION = "DURATION"  # metavar of every duration flag: 600s, 10m, 24h; a bare number is seconds


def _ns(text: str | None, flag: str, allow_zero: bool = False) -> int | None:
    """A DURATION flag (600s, 10m, 24h; a bare number is seconds) in nanoseconds; None if not given."""
    if text is None:
        return None
    return parse_duration_ns(text, flag, allow_zero=allow_zero)


def _factor(value: float | None, flag: str) -> float | None:
    if value is not None and not (math.isfinite(value) and value > 0):
        raise BadInput(f"{flag} {value}: must be a finite number greater than 0")
    return value


def _lag_bound_ns(text: str | None, legacy_ms: float | None) -> int | None:
    if text is not None:
        return gate_options.dispatch_lag_ns(text)
    if legacy_ms is not None:
        if not (math.isfinite(legacy_ms) and legacy_ms > 0):
            raise BadInput(f"--lag-bound-ms {legacy_ms}: must be a finite number greater than 0")
        return _ns(f"{legacy_ms!r}ms", "--lag-bound-ms")
    return None


def _limits(max_dispatch_lag_ns: int | None):
    """The run's fidelity limits with --max-dispatch-lag applied (None: the defaults)."""
    if max_dispatch_lag_ns is None:
        return None
    from replayer.compare.gate_limits import FidelityLimits

    return FidelityLimits(max_dispatch_lag_p99_ns=max_dispatch_lag_ns)


def _metrics_url(url: str | None) -> str | None:
    if url is None:
        return None
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError as exc:
        raise BadInput(f"--server-metrics {url!r}: not a URL ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise BadInput(
            f"--server-metrics {url!r}: expected an http:// or https:// URL, e.g. http://HOST:PORT/metrics"
        )
    try:
        parts.port  # noqa: B018 (raises ValueError for a port that is not a number)
    except ValueError:
        raise BadInput(f"--server-metrics {url!r}: the port is not a number from 1 to 65535") from None
    return url


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
@click.option("--speed", type=float, help="Time factor: 2 sends twice as fast [default: 1].")
@click.option(
    "--scale", type=float, help="Load factor on sessions: 0.5 keeps half, 2 adds a copy of each [default: 1]."
)
@click.option("--seed", type=int, help="Seed of --scale sampling, copy jitter and copy nonces [default: 0].")
@click.option(
    "--copy-jitter",
    "copy_jitter_s",
    metavar=DURATION,
    help="Bound of the seeded shift of --scale copies [default: 1s].",
)
@click.option("--from", "from_s", metavar=DURATION, help="Start of the trace window, from its first request.")
@click.option("--to", "to_s", metavar=DURATION, help="End of the trace window, from its first request.")
@click.option("--limit", type=int, help="Send at most N trace rows.")
@click.option(
    "--max-idle-gap", "max_idle_gap_s", metavar=DURATION, help="Cut idle stretches longer than this."
)
@click.option("--no-cancellations", is_flag=True, help="Do not mirror production client disconnects.")
@click.option("--workers", type=int, help="Processes, each owning a shard of the sessions [default: 1].")
@click.option(
    "--max-inflight", type=int, help="Cap on open requests; above it requests are shed [default: 10000]."
)
@click.option(
    "--duration",
    "duration_s",
    metavar=DURATION,
    help="Stop sending after this long; later requests are not built.",
)
@click.option(
    "--grace",
    "grace_s",
    metavar=DURATION,
    help="After a stop, wait this long for in-flight requests [default: 30s].",
)
@click.option(
    "--engine", type=click.Choice(ENGINES), help="Fields that force output length [default: detect]."
)
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
@click.option(
    "--tokenizer", help="Tokenizer for synthesized prompts and missing usage [default: mistral-tekken]."
)
@click.option(
    "--connect-timeout", "connect_timeout_s", metavar=DURATION, help="TCP connect timeout [default: 30s]."
)
@click.option(
    "--read-timeout",
    "read_timeout_s",
    metavar=DURATION,
    help="Longest silence within one response [default: 600s].",
)
@click.option(
    "--server-metrics",
    "server_metrics_url",
    help="Prometheus URL to scrape every second during the run (checked before the clock starts).",
)
@gate_options.gate_options
@click.option("--lag-bound-ms", type=float, hidden=True)  # the old spelling of --max-dispatch-lag, in ms
@click.option("--quiet", is_flag=True, help="No progress display and no table: the one-line verdict only.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def replay(trace, target, run_dir, **opts):
    """Replay TRACE open-loop against --target and write results to RUN_DIR.

    Ends with a one-line verdict; exit 1 when the replay was unfaithful (requests not sent,
    dispatch lag over --max-dispatch-lag, lengths off) or more than --max-error-rate of its requests
    failed: the checks `llmreplay report` makes of the run.
    """
    from llmreplay.output_paths import check_output_dir
    from replayer.config import ReplayConfig, ScheduleConfig

    check_output_dir(run_dir, "-o")
    schedule = ScheduleConfig(
        **_given(
            speed=_factor(opts["speed"], "--speed"),
            scale=_factor(opts["scale"], "--scale"),
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
            server_metrics_url=_metrics_url(opts["server_metrics_url"]),
            limits=_limits(_lag_bound_ns(opts["max_dispatch_lag"], opts["lag_bound_ms"])),
            max_error_rate=gate_options.error_rate(opts["max_error_rate"]),
            quiet=opts["quiet"] or opts["as_json"],
        ),
    )
    _run(config, opts["as_json"])


def _run(config, as_json: bool) -> None:
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
    raise SystemExit(outcome.exit_code)
