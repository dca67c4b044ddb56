"""`llmreplay record`: the flags are built from RecordRun's and RecorderConfig's fields; the command
fills a RecordRun, checks it and hands it to the embedded proxy.

Heavy imports (mitmproxy) happen inside the command so `--help` stays fast.
"""

from __future__ import annotations

import click

from llmreplay import options
from llmreplay.errors import BadInput
from recorder.embedded import RecordRun


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


@click.command("record")
@options.click_options(RecordRun)
def record(**values):
    """Record LLM traffic at the gateway: stream it through untouched, write one trace row per request."""
    import logging

    from llmreplay.output_paths import check_output_dir
    from recorder.embedded import run_recorder
    from recorder.keys import load_or_create_key
    from recorder.spool import check_spool_dir

    run = options.build(RecordRun, values)
    config = run.recorder.validated()
    check_output_dir(config.out, "-o")
    check_spool_dir(config.out, "-o")
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
