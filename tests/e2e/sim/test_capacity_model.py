"""The capacity model against the real sim: fixed-rate replays of a shape trace at two rates below the
slow profile's saturation and one above, measured by `llmreplay replay` as a client sees them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from capacity_search import write_fixed_length_trace
from live_processes import ProcessPool, start_sim_process
from replay_helpers import run_replay

from llmreplay.metrics import per_request_latencies_ns, success_mask
from llmreplay.sim.capacity_model import RequestMix, saturation, steady_state
from llmreplay.sim.config import build_config

pytestmark = [pytest.mark.e2e, pytest.mark.long]  # starts a sim and replays for about 40 s

PROMPT_TOKENS, OUTPUT_TOKENS, BLOCK_SIZE = 256, 64, 64
SEND_S = 8.0  # seconds of arrivals per rate
TOLERANCE = 0.10  # throughput and median TPOT, measured over the middle of the arrivals


def measured(run_dir: Path) -> tuple[float, float]:
    """(requests ended per second, median TPOT in s) over the middle half of the send window."""
    table = pq.read_table(run_dir / "results.parquet")
    ok = success_mask(table)
    sent = np.asarray(table.column("sent_offset_ns").to_numpy(zero_copy_only=False), dtype=float)
    ended = sent + per_request_latencies_ns(table)["e2e"]
    lo, hi = np.nanquantile(sent, 0.25), np.nanquantile(sent, 0.75)
    throughput = np.sum(ok & (ended >= lo) & (ended <= hi)) / ((hi - lo) / 1e9)
    middle = ok & (sent >= lo) & (sent <= hi)
    return float(throughput), float(np.nanmedian(per_request_latencies_ns(table)["tpot"][middle]) / 1e9)


def test_the_sim_runs_at_the_models_rates(tmp_path):
    config, mix = build_config("slow", {}), RequestMix.fixed(PROMPT_TOKENS, OUTPUT_TOKENS)
    knee = saturation(config, mix).rate_per_s  # 10.2 req/s
    pool = ProcessPool(tmp_path)
    try:
        url = start_sim_process(pool, "--profile", "slow", "--block-size", str(BLOCK_SIZE))
        for seed, share in enumerate((0.3, 0.65, 1.5)):
            rate = share * knee
            trace = tmp_path / f"x{share}.parquet"
            times = [i / rate for i in range(int(rate * SEND_S))]
            write_fixed_length_trace(
                trace, times, PROMPT_TOKENS, OUTPUT_TOKENS, block_size=BLOCK_SIZE, seed=seed
            )
            run_dir = tmp_path / f"run-{share}"
            done = run_replay(trace, url, run_dir, "--max-dispatch-lag", "50ms", timeout_s=120)
            assert done.returncode == 0, done.stderr[-2000:]
            throughput, tpot_s = measured(run_dir)
            model = steady_state(config, mix, rate)
            print(f"x{share}: {throughput:.2f} req/s (model {model.achieved_rate_per_s:.2f}), "
                  f"TPOT {tpot_s * 1e3:.1f} ms (model {model.tpot_s * 1e3:.1f})")  # fmt: skip
            assert throughput == pytest.approx(model.achieved_rate_per_s, rel=TOLERANCE)
            assert tpot_s == pytest.approx(model.tpot_s, rel=TOLERANCE)
    finally:
        pool.stop_all()
