"""The `llmreplay` command: one click group whose subcommands live next to the code they drive.

Subcommands are imported only when invoked, so `--help` stays fast and a stage whose module
is not installed yet is simply absent. BadInput and click's usage errors become one line on stderr
and exit status 2; Ctrl-C exits 130.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys

import click

from llmreplay import __version__
from llmreplay.errors import BadInput

# name -> "module:attribute" of a click.Command; a missing module means the command is absent.
SUBCOMMANDS = {
    "record": "recorder.cli:record",
    "anonymize": "anonymizer.cli:anonymize",
    "replay": "replayer.cli:replay",
    "compare": "replayer.compare.cli:compare",
    "report": "replayer.compare.cli:report",
    "sim": "llmreplay.sim.cli:sim",
    "import": "llmreplay.importers.cli:import_trace",
    "export": "llmreplay.exporters:export_trace",
    "inspect": "llmreplay.inspect_cli:inspect_trace",
    "demo": "llmreplay.demo:demo",
    "capacity": "replayer.capacity.cli:capacity",
    "barrier": "replayer.launch.cli:barrier",
    "k8s-job": "replayer.launch.cli:k8s_job",
    "merge": "replayer.launch.cli:merge",
    "plan": "replayer.launch.cli:plan",
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
            fail(str(exc))

    def main(self, args=None, prog_name=None, **extra):
        """click's main without its three-line usage errors: every failure is one line."""
        try:
            code = super().main(args, prog_name, standalone_mode=False, **extra)
        except click.UsageError as exc:
            fail(f"{exc.format_message()} (see '{self._command_path(exc, args, prog_name)} --help')")
        except click.ClickException as exc:
            fail(exc.format_message(), exc.exit_code)
        except BadInput as exc:
            fail(str(exc))
        except (click.Abort, KeyboardInterrupt):
            fail("interrupted", 130)
        except BrokenPipeError:
            sys.stderr.close()  # the reader went away (`| head`): nothing more to say
            sys.exit(141)
        sys.exit(code if isinstance(code, int) else 0)

    def _command_path(self, exc: click.UsageError, args, prog_name) -> str:
        if exc.ctx is not None and exc.ctx.command is not self:
            return exc.ctx.command_path
        given = sys.argv[1:] if args is None else list(args)
        name = next((arg for arg in given if arg in SUBCOMMANDS), None)  # an error raised before its context
        root = exc.ctx.command_path if exc.ctx is not None else prog_name or "llmreplay"
        return f"{root} {name}" if name else root


def fail(message: str, code: int = 2):
    """One line on stderr, then exit: the one way a command reports bad input."""
    click.echo(f"llmreplay: error: {' '.join(message.split())}", err=True)
    sys.exit(code)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="llmreplay")
def cli():
    """Record LLM traffic at the gateway, anonymize it, replay its real shape, compare."""


def main() -> None:
    cli(prog_name="llmreplay")


if __name__ == "__main__":
    main()
