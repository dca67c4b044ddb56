"""mitmproxy embedded with the recorder addon: a minimal master, lazy upstream connections, graceful drain.

Drain on SIGTERM/SIGINT or at the end of --duration: stop listening, let live requests finish
(up to a timeout), then shut down, so clients are not cut off and every row is written.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

from llmreplay.errors import BadInput
from llmreplay.options import duration_s as seconds_flag
from llmreplay.options import http_url, option
from recorder.config import RecorderConfig, option_names

log = logging.getLogger("llmreplay.recorder")


def parse_listen(text: str, flag: str) -> tuple[str, int]:
    """`HOST:PORT` (an IPv6 host in brackets; no host: loopback) -> (host, port)."""
    host, _, port = text.rpartition(":")
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise BadInput(f"{flag} {text!r}: expected HOST:PORT, e.g. 127.0.0.1:8080")
    return host.strip("[]") or "127.0.0.1", int(port)


def parse_upstream(text: str, flag: str) -> str:
    http_url(text, flag)
    return text.rstrip("/")


@dataclass(frozen=True, slots=True)
class RecordRun:
    """One `llmreplay record`: the proxy's own settings around the addon's RecorderConfig."""

    upstream: str = option(
        flags=("--upstream",),
        required=True,
        metavar="URL",
        parse=parse_upstream,
        help="The inference gateway or engine to forward to (http[s]://HOST:PORT).",
    )
    listen: tuple[str, int] = option(
        ("127.0.0.1", 8080),
        metavar="HOST:PORT",
        parse=parse_listen,
        show=lambda listen: f"{listen[0]}:{listen[1]}",
        help="Address to listen on.",
    )
    recorder: RecorderConfig = field(default_factory=RecorderConfig)
    duration_s: float | None = option(
        None, flags=("--duration",), help="Stop (gracefully) after this long.", **seconds_flag()
    )
    drain_timeout_s: float = option(
        30.0,
        flags=("--drain-timeout",),
        help="On SIGTERM/SIGINT, wait this long for live requests.",
        **seconds_flag(),
    )
    confdir: str = option(
        "~/.llmreplay/mitmproxy", help="mitmproxy's config dir (its CA lives there, even in plain-http mode)."
    )
    uvloop: bool = option(False, flag_value=True, help="Run mitmproxy on uvloop (less CPU per request).")

    @property
    def listen_host(self) -> str:
        return self.listen[0]

    @property
    def listen_port(self) -> int:
        return self.listen[1]


def run_recorder(run: RecordRun) -> int:
    """Serve until the operator stops it; the exit status: 0 when everything seen was filed, else 1."""
    if run.uvloop:
        import uvloop

        return uvloop.run(_serve(run))
    return asyncio.run(_serve(run))


def minimal_master():
    """A mitmproxy master with only the addons a reverse proxy needs (12% cheaper than DumpMaster).

    The recorder runs on it, and so does the benchmark's bare-passthrough floor, so the two differ
    only by the recorder addon.
    """
    from mitmproxy import options
    from mitmproxy.addons import core, errorcheck, next_layer, proxyserver, tlsconfig
    from mitmproxy.master import Master

    opts = options.Options()
    master = Master(opts)
    master.addons.add(
        core.Core(),
        proxyserver.Proxyserver(),
        next_layer.NextLayer(),
        tlsconfig.TlsConfig(),
        errorcheck.ErrorCheck(True),
    )
    return opts, master


async def _serve(run: RecordRun) -> int:
    from mitmproxy import exceptions

    from recorder.addon import OPTION_PREFIX, Recorder

    opts, master = minimal_master()
    recorder = Recorder()
    master.addons.add(recorder)
    recorder_options = {
        OPTION_PREFIX + name: _option_value(getattr(run.recorder, name)) for name in option_names()
    }
    try:
        opts.update(
            mode=[f"reverse:{run.upstream}"],
            listen_host=run.listen_host,
            listen_port=run.listen_port,
            connection_strategy="lazy",  # eager would drop requests (no flow, no row) while the upstream is down
            confdir=str(Path(run.confdir).expanduser()),
            **recorder_options,
        )
    except exceptions.OptionsError as exc:
        raise BadInput(str(exc)) from None
    loop = asyncio.get_running_loop()
    draining: list[asyncio.Task] = []

    def drain(reason: str) -> None:
        if draining:  # a second signal: stop now
            master.shutdown()
            return
        log.info("llmreplay recorder: %s, draining %d live requests", reason, len(recorder.live))
        draining.append(loop.create_task(_drain(master, recorder, run.drain_timeout_s)))

    loop.set_exception_handler(_quiet_cancellations)
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, drain, signal.Signals(signum).name)
    if run.duration_s is not None:
        loop.call_later(run.duration_s, drain, f"--duration {run.duration_s:g}s reached")
    await master.run()
    if recorder.startup_error:
        raise BadInput(recorder.startup_error)
    report = recorder.stop_report
    if not draining:
        log.critical("llmreplay recorder: the proxy stopped without being asked to; see the log above")
        return 1
    return 0 if report is None or report.ok else 1


async def _drain(master, recorder, timeout_s: float) -> None:
    master.options.update(server=False)  # stop accepting; open connections carry on
    deadline = time.monotonic() + timeout_s
    while recorder.live and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    master.shutdown()


def _quiet_cancellations(loop, context: dict) -> None:
    """mitmproxy cancels open client connections at shutdown; asyncio would print each as a traceback."""
    if isinstance(context.get("exception"), asyncio.CancelledError):
        return
    loop.default_exception_handler(context)


def _option_value(value):
    return list(value) if isinstance(value, tuple) else value
