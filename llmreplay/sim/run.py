"""Process lifecycle of `llmreplay sim`: start, serve until SIGTERM/SIGINT, publish the logs."""

from __future__ import annotations

import asyncio
import gc
import signal
import sys
from pathlib import Path

from llmreplay.errors import BadInput
from llmreplay.sim.config import SimConfig

SHUTDOWN_GRACE_S = 2.0


def run_sim(config: SimConfig) -> None:
    """Blocks until stopped by a signal; raises BadInput for unusable settings (port, log path)."""
    _check_log_path(config.log_path)
    if config.event_loop == "uvloop":
        import uvloop

        uvloop.run(serve(config))
    else:
        asyncio.run(serve(config))


def _check_log_path(log_path: str | None) -> None:
    """Refuse an unusable --log at start (a link, directory, device, unwritable place), not at exit."""
    if log_path is None:
        return
    from llmreplay.output_paths import check_output_file
    from llmreplay.sim.ground_truth import steps_log_path

    parent = Path(log_path).resolve().parent
    if not parent.is_dir():
        raise BadInput(f"--log {log_path}: directory {parent} does not exist")
    for path in (log_path, steps_log_path(log_path)):
        check_output_file(path, force=True, flag="--log")  # the sim replaces its logs of a former run


async def serve(config: SimConfig, stop: asyncio.Event | None = None, on_listening=None) -> None:
    """Serve until `stop` is set (None: until SIGTERM/SIGINT); `on_listening(port)` once bound."""
    from aiohttp import web

    from llmreplay.sim.read_stamps import stamp_reads
    from llmreplay.sim.server import SimServer
    from llmreplay.tokenizers import load_tokenizer

    if config.prompt_count == "chars/4":
        from llmreplay.sim.char_count import CharsPerToken

        tokenizer = CharsPerToken()
    else:
        tokenizer = load_tokenizer(config.tokenizer)
    server = SimServer(config, tokenizer)
    # The tokenizer leaves ~60k long-lived objects; a full collection walking them stalls the
    # loop for tens of ms (measured 70 ms), so they move out of the collector's sight.
    gc.collect()
    gc.freeze()
    # handler_cancellation: a client that hangs up cancels its handler, which frees the batch slot
    runner = web.AppRunner(
        server.app(), access_log=None, handle_signals=False, handler_cancellation=True,
        shutdown_timeout=SHUTDOWN_GRACE_S,
    )  # fmt: skip
    await runner.setup()
    stamp_reads(runner)  # arrivals stamped at the read, not when the handler ran
    site = web.TCPSite(runner, config.host, config.port, backlog=4096, reuse_address=True)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        raise BadInput(f"--host {config.host} --port {config.port}: cannot listen ({exc.strerror})") from None
    if stop is None:
        stop = asyncio.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            asyncio.get_running_loop().add_signal_handler(signum, stop.set)
    port = site._server.sockets[0].getsockname()[1] if site._server else config.port
    print(
        f"llmreplay sim: serving {', '.join(config.models)} on http://{config.host}:{port}",
        file=sys.stderr,
        flush=True,
    )
    if on_listening is not None:
        on_listening(port)
    await stop.wait()
    server.begin_shutdown()
    await runner.cleanup()
    await server.close()
    print("llmreplay sim: stopped", file=sys.stderr, flush=True)
