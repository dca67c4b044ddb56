"""`llmreplay record`: parse and validate flags into a RecordRun, then hand it to the embedded proxy.

Heavy imports (mitmproxy, tokenizers) happen inside the command so `--help` stays fast.
"""

from __future__ import annotations

import click

from llmreplay.errors import BadInput
from llmreplay.options import http_url


def _listen(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise BadInput(f"--listen {text!r}: expected HOST:PORT, e.g. 127.0.0.1:8080")
    return host.strip("[]") or "127.0.0.1", int(port)


def _check_listen(host: str, port: int) -> None:
    """Bind once before mitmproxy does, so a busy port is one line, not mitmproxy's startup advice."""
    import errno
    import socket

    where = f"--listen {host}:{port}"
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except socket.gaierror as exc:
        raise BadInput(f"{where}: cannot resolve {host} ({exc.strerror})") from None
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as mitmproxy binds
        try:
            probe.bind(address)
        except OSError as exc:
            reason = {
                errno.EADDRINUSE: "address already in use (another process listens there; choose another port)",
                errno.EADDRNOTAVAIL: "no such address on this machine",
                errno.EACCES: "permission denied (ports below 1024 need privileges)",
            }.get(exc.errno, exc.strerror)
            raise BadInput(f"{where}: {reason}") from None


def _upstream(url: str) -> str:
    http_url(url, "--upstream")
    return url.rstrip("/")


@click.command("record")
@click.option(
    "--upstream", required=True, help="The inference gateway or engine to forward to (http[s]://HOST:PORT)."
)
@click.option("--listen", "listen", default=None, help="HOST:PORT to listen on [default: 127.0.0.1:8080].")
@click.option(
    "-o", "--out", required=True, type=click.Path(file_okay=False), help="Directory for the trace files."
)
@click.option(
    "--content/--shape",
    default=None,
    help="Also record content (for anonymization), or shape only [default: shape].",
)
@click.option("--session-header", default=None, help="Request header that names the session (conversation).")
@click.option(
    "--session-from-user", is_flag=True, default=None, help="Use the request's `user` field as the session."
)
@click.option(
    "--tokenizer", default=None, help="Tokenizer when the server sends no usage [default: mistral-tekken]."
)
@click.option(
    "--key-file",
    default=None,
    help="Secret key for keyed hashes, outside the trace [default: ~/.config/llmreplay/recorder.key].",
)
@click.option("--block-size", type=int, default=None, help="Tokens per prefix-hash block [default: 512].")
@click.option(
    "--path",
    "paths",
    multiple=True,
    help="URL path to record (exact or glob); repeat. [default: the OpenAI paths]",
)
@click.option(
    "--rotate",
    default=None,
    help="New Parquet file after a time and/or size: 1h, 256MB, '1h,256MB' [default: 1h].",
)
@click.option(
    "--spool-limit",
    default=None,
    help="Disk kept for unconverted captures while filing lags or is down; beyond it new captures"
    " are dropped and counted, traffic still flows [default: 4GB].",
)
@click.option("--duration", default=None, help="Stop (gracefully) after this long: 600s, 10m, 24h.")
@click.option(
    "--max-sessions",
    type=int,
    default=None,
    help="Conversations remembered for session inference [default: 100000].",
)
@click.option(
    "--drain-timeout",
    default=None,
    help="On SIGTERM/SIGINT, wait this long for live requests [default: 30s].",
)
@click.option("--stats-interval", default=None, help="Log counters and loop lag this often [default: 60s].")
@click.option(
    "--confdir",
    default=None,
    help="mitmproxy's config dir (its CA lives there) [default: ~/.llmreplay/mitmproxy].",
)
@click.option("--uvloop", is_flag=True, default=False, help="Run mitmproxy on uvloop (less CPU per request).")
def record(upstream, listen, out, content, session_header, session_from_user, tokenizer, key_file, block_size,
           paths, rotate, spool_limit, duration, max_sessions, drain_timeout, stats_interval, confdir, uvloop):  # fmt: skip
    """Record LLM traffic at the gateway: stream it through untouched, write one trace row per request."""
    import logging

    from llmreplay.output_paths import check_output_dir
    from recorder.config import RecorderConfig, check_tokenizer_spec, parse_duration_s
    from recorder.embedded import RecordRun, run_recorder
    from recorder.keys import load_or_create_key

    given = {
        "out": out,
        "content": content,
        "session_header": session_header,
        "session_from_user": session_from_user,
        "tokenizer": tokenizer,
        "key_file": key_file,
        "block_size": block_size,
        "paths": tuple(paths) or None,
        "rotate": rotate,
        "spool_limit": spool_limit,
        "max_sessions": max_sessions,
        "stats_interval_s": parse_duration_s(stats_interval, "--stats-interval") if stats_interval else None,
    }
    config = RecorderConfig(**{k: v for k, v in given.items() if v is not None}).validated()
    check_tokenizer_spec(config.tokenizer)
    run_fields = {"upstream": _upstream(upstream), "recorder": config, "uvloop": uvloop}
    if listen:
        run_fields["listen_host"], run_fields["listen_port"] = _listen(listen)
    if duration:
        run_fields["duration_s"] = parse_duration_s(duration)
    if confdir:
        run_fields["confdir"] = confdir
    if drain_timeout:
        run_fields["drain_timeout_s"] = parse_duration_s(drain_timeout, "--drain-timeout")
    run = RecordRun(**run_fields)
    check_output_dir(config.out, "-o")
    check_output_dir(run.confdir, "--confdir")
    load_or_create_key(config.key_file)  # the policy of llmreplay.key_files, checked before the proxy starts
    _check_listen(run.listen_host, run.listen_port)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    logging.getLogger("mitmproxy").setLevel(logging.WARNING)
    click.echo(
        f"llmreplay record: {run.listen_host}:{run.listen_port} -> {run.upstream}, writing to {config.out}",
        err=True,
    )
    raise SystemExit(run_recorder(run))
