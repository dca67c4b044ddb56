"""What the capacity tests share (one home): the command line, a sim profile whose capacity the sim's
model computes, and an evenly spaced trace."""

from __future__ import annotations

import subprocess

from live_processes import ROOT, llmreplay_cmd
from replay_helpers import content_record, write_content_trace

from llmreplay.sim.capacity_model import RequestMix, max_rate_for_tpot, saturation
from llmreplay.sim.config import build_config

OUTPUT_TOKENS, PROMPT_TOKENS = 40, 64
PROFILE = "max_num_seqs = 16\ndecode_base_ms = 5.0\ndecode_per_seq_ms = 1.0\nprefill_ns_per_token = 0\n"
TRACE_RPS = 10.0  # the window's rate at factor 1
# The loaded test machine delays dispatch by ~10 ms now and then; the server's limit is the point here.
STEP_FLAGS = ("--json", "--skip-preflight", "--window", "5s", "--warmup", "1s", "--max-dispatch-lag", "50ms")


def capacity_cmd(trace, url: str, out, *flags: str) -> list[str]:
    return llmreplay_cmd("capacity", str(trace), "--target", url, "-o", str(out), *flags)


def run_capacity(trace, url: str, out, *flags: str, timeout_s: float = 150) -> subprocess.CompletedProcess:
    return subprocess.run(
        capacity_cmd(trace, url, out, *flags), cwd=ROOT, capture_output=True, text=True, timeout=timeout_s
    )


def known(profile_path, tpot_s: float) -> tuple[float, float]:
    """(saturation req/s, largest req/s with TPOT <= tpot_s) of the profile, from the sim's own model."""
    config = build_config(str(profile_path), {})
    mix = RequestMix.fixed(PROMPT_TOKENS, OUTPUT_TOKENS)
    return saturation(config, mix).rate_per_s, max_rate_for_tpot(config, mix, tpot_s)


def even_trace(path, lead_s=2.0, dense_s=10.0, rate=TRACE_RPS):
    """A sparse lead-in at 5 req/s (the warm-up's room), then evenly spaced requests at `rate`."""
    times = [i * 200.0 for i in range(int(lead_s * 5))]
    times += [lead_s * 1000 + i * 1000 / rate for i in range(int(dense_s * rate))]
    records = [
        content_record(i, t, completion_tokens=OUTPUT_TOKENS, prompt_tokens=PROMPT_TOKENS)
        for i, t in enumerate(times)
    ]
    return write_content_trace(path, records)
