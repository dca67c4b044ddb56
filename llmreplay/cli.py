"""The `llmreplay` command: one click group whose subcommands live next to the code they drive.

Subcommands are imported only when invoked, so `--help` stays fast and a stage whose module
is not installed yet is simply absent. BadInput becomes one line on stderr and exit status 2.
"""

from __future__ import annotations

import importlib
import importlib.util

import click

from llmreplay import __version__
from llmreplay.errors import BadInput

# name -> "module:attribute" of a click.Command; a missing module means the command is absent.
SUBCOMMANDS = {
    "record": "recorder.cli:record",
    "anonymize": "anonymizer.cli:anonymize",
    "replay": "replayer.cli:replay",
    "compare": "replayer.compare_cli:compare",
    "report": "replayer.compare_cli:report",
    "sim": "llmreplay.sim.cli:sim",
    "import": "llmreplay.importers.cli:import_trace",
    "export": "llmreplay.exporters:export_trace",
    "inspect": "llmreplay.inspect_cli:inspect_trace",
    "demo": "llmreplay.demo:demo",
}


def _available(name: str) -> bool:
    module = SUBCOMMANDS[name].split(":", 1)[0]
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


class LazyGroup(click.Group):
    def list_commands(self, ctx):
        return sorted(name for name in SUBCOMMANDS if _available(name))

    def get_command(self, ctx, name):
        if name not in SUBCOMMANDS or not _available(name):
            return None
        module_name, attribute = SUBCOMMANDS[name].split(":", 1)
        return getattr(importlib.import_module(module_name), attribute)

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except BadInput as exc:
            click.echo(f"llmreplay: error: {exc}", err=True)
            ctx.exit(2)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="llmreplay")
def cli():
    """Record LLM traffic at the gateway, anonymize it, replay its real shape, compare."""


def main() -> None:
    cli(prog_name="llmreplay")


if __name__ == "__main__":
    main()
