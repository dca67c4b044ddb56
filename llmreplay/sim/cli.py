"""`llmreplay sim`: the flags are built from SimConfig's fields; a profile fills in below the flags given."""

from __future__ import annotations

import click

from llmreplay import options
from llmreplay.sim.config import SimConfig


@click.command()
@click.option(
    "--profile", help="Engine profile: 'fast', 'slow' or a TOML file whose keys are the flag names with '_'."
)
@options.click_options(SimConfig)
def sim(profile, **values):
    """Serve a simulated OpenAI-compatible engine (continuous batching, prefix cache, faults).

    Ready when GET /health answers 200. Test hook: the request header X-Sim-Fault forces a
    fault (llmreplay/sim/faults.py FAULTS; an unknown value is answered with the list).
    """
    from llmreplay.sim.config import build_config
    from llmreplay.sim.run import run_sim

    given = {path[-1]: value for path, value in options.given(SimConfig, values).items()}
    run_sim(build_config(profile, given))
