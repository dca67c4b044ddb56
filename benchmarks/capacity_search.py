"""The capacity search's cost against `llmreplay sim` on 127.0.0.1, beside a fixed sweep's at the same
precision, and how far the knee and the SLO limit it finds are from the sim's analytical capacity
(llmreplay/sim/capacity_model.py). Prints figures; asserts nothing about time.

A synthetic trace of evenly spaced streamed requests of fixed lengths (no prefix sharing) is searched
twice by `llmreplay capacity --by scale`, each against a fresh sim of `--profile`: with a TPOT SLO the
model can place (the SLO limit), and with a loose TTFT SLO, so that the search runs into the knee.
The fixed sweep is not run: its cost is its step count (a linear sweep from the start factor to the
point found, in steps of precision x that factor) times the search's median step seconds.

    .venv/bin/python benchmarks/capacity_search.py [--profile slow] [--rate 2] [--prompt 256] [--output 64]
        [--tpot-ms 20] [--ttft-ms 2000] [--window 20s] [--warmup 5s] [--precision 0.05] [--budget 15m]
        [--max-dispatch-lag 50ms] [--out DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from _support import free_port, wait_http_ok  # noqa: E402

from llmreplay.durations import parse_duration_ns  # noqa: E402
from llmreplay.processes import stop_process  # noqa: E402
from llmreplay.sim.capacity_model import RequestMix, max_rate_for_tpot, saturation  # noqa: E402
from llmreplay.sim.config import build_config  # noqa: E402
from llmreplay.trace_format import TraceMeta, TraceRecord  # noqa: E402
from llmreplay.trace_io import write_trace  # noqa: E402

T0_US = 1_700_000_000_000_000
BLOCK_SIZE = 64
HARD_TIMEOUT_S = 3600  # the whole command, whatever --budget says


def arrivals_s(rate_per_s: float, warmup_s: float, seconds: float) -> list[float]:
    """Evenly spaced at `rate_per_s`, the first `warmup_s` at 0.9x: the busiest window (where the search
    measures) then starts after them, and the warm-up has trace to replay."""
    times, at = [], 0.0
    while at < seconds:
        times.append(at)
        at += 1 / (rate_per_s * (0.9 if at < warmup_s else 1.0))
    return times


def write_fixed_length_trace(
    path: Path, times_s: list[float], prompt: int, output: int, *, model: str = "sim-model",
    block_size: int = BLOCK_SIZE, seed: int = 0, source: str = "bench:capacity",
) -> int:  # fmt: skip
    """Streamed chat requests of fixed lengths at `times_s` (trace seconds), each its own session, no prefix
    shared (nor with another seed's: an engine's prefix cache outlives a replay). Also the tests' trace."""
    rng = random.Random(seed)
    records = [
        TraceRecord(
            request_id=f"r{i}",
            arrival_time=T0_US + round(at * 1e6),
            endpoint="chat_completions",
            prompt_tokens=prompt,
            completion_tokens=output,
            token_source="imported",
            model=model,
            stream=True,
            prefix_block_hashes=tuple(rng.getrandbits(62) for _ in range(math.ceil(prompt / block_size))),
        )
        for i, at in enumerate(times_s)
    ]
    write_trace(path, records, TraceMeta(source=source, block_size=block_size, relative_time=True))
    return len(records)


def run_capacity(args, slo: str, trace: Path, url: str, out: Path) -> tuple[dict, float]:
    cmd = [
        sys.executable, "-m", "llmreplay.cli", "capacity", str(trace), "--target", url, "-o", str(out),
        "--slo", slo, "--by", "scale", "--window", args.window, "--warmup", args.warmup,
        "--precision", str(args.precision), "--budget", args.budget,
        "--max-dispatch-lag", args.max_dispatch_lag, "--quiet",
    ]  # fmt: skip
    started = time.monotonic()
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=HARD_TIMEOUT_S)
    total_s = time.monotonic() - started
    path = out / "capacity.json"
    if not path.is_file():
        sys.exit(f"capacity wrote no capacity.json (exit {done.returncode}):\n{done.stderr[-3000:]}")
    print(done.stdout.strip().splitlines()[-1] if done.stdout.strip() else f"(exit {done.returncode})")
    return json.loads(path.read_text()), total_s


def sweep_steps(start: float, limit: float, precision: float) -> int:
    """A linear sweep from `start` to `limit` in steps of precision x limit, both ends included."""
    return math.floor((limit - start) / (precision * limit) + 1e-9) + 1


def off_by(found: float | None, model: float) -> str:
    return "–" if found is None else f"{found:.3g} (model {model:.3g}, {found / model - 1:+.1%})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="slow")
    parser.add_argument("--rate", type=float, default=2.0, help="the trace's own rate, req/s (factor 1)")
    parser.add_argument("--prompt", type=int, default=256)
    parser.add_argument("--output", type=int, default=64)
    parser.add_argument("--tpot-ms", type=float, default=20.0, help="the SLO of the limit search")
    parser.add_argument("--ttft-ms", type=float, default=2000.0, help="the loose SLO of the knee search")
    parser.add_argument("--window", default="20s")
    parser.add_argument("--warmup", default="5s")
    parser.add_argument("--precision", type=float, default=0.05)
    parser.add_argument("--budget", default="15m", help="of each search")
    parser.add_argument(
        "--max-dispatch-lag", default="50ms", help="client-bound above this (a shared machine)"
    )
    parser.add_argument("--out", type=Path, default=None, help="keep the capacity directories here")
    args = parser.parse_args()

    config, mix = build_config(args.profile, {}), RequestMix.fixed(args.prompt, args.output)
    window_s = parse_duration_ns(args.window, "--window") / 1e9
    warmup_s = parse_duration_ns(args.warmup, "--warmup") / 1e9
    times = arrivals_s(
        args.rate, warmup_s, warmup_s + 2 * window_s + 1
    )  # room for the 2x-window sustain step
    searches = {  # name -> (SLO, the model's rate for what that search finds)
        "limit": (f"tpot_p95<={args.tpot_ms:g}ms", max_rate_for_tpot(config, mix, args.tpot_ms / 1e3)),
        "knee": (f"ttft_p95<={args.ttft_ms:g}ms", saturation(config, mix).rate_per_s),
    }
    with tempfile.TemporaryDirectory(prefix="bench-capacity-") as tmp:
        tmp_path = Path(tmp)
        trace = tmp_path / "trace.parquet"
        count = write_fixed_length_trace(trace, times, args.prompt, args.output)
        print(
            f"trace: {count} requests at {args.rate:g} req/s, prompt {args.prompt}, output {args.output} tokens; "
            f"sim --profile {args.profile}; window {args.window}, warm-up {args.warmup}, precision "
            f"{args.precision:.0%}, budget {args.budget} a search, client-bound above dispatch lag p99 "
            f"{args.max_dispatch_lag}"
        )
        for name, (slo, model_rate) in searches.items():
            out = (args.out or tmp_path) / f"capacity-{name}"
            print(f"\n== the {name} search: --slo '{slo}'")
            with running_sim(args.profile, tmp_path / f"sim-{name}.log") as url:  # a fresh engine each
                capacity, total_s = run_capacity(args, slo, trace, url, out)
            report(capacity, total_s, args.precision, name, model_rate)


@contextlib.contextmanager
def running_sim(profile: str, log: Path):
    port = free_port()
    cmd = [sys.executable, "-m", "llmreplay.cli", "sim", "--host", "127.0.0.1", "--port", str(port),
           "--profile", profile, "--block-size", str(BLOCK_SIZE)]  # fmt: skip
    with open(log, "wb") as out:
        sim = subprocess.Popen(cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_http_ok(f"http://127.0.0.1:{port}/health", sim, 60, log=log)
        yield f"http://127.0.0.1:{port}"
    finally:
        stop_process(sim)


def report(capacity: dict, total_s: float, precision: float, name: str, model_rate: float) -> None:
    steps = capacity["steps"]
    step_s = [s["elapsed_s"] for s in steps]
    median_s = statistics.median(step_s) if step_s else 0.0
    window, warmup = capacity["window"], capacity["warmup"]
    print(f"window {window['start_s']:g}-{window['end_s']:g} s ({window['requests']} requests), "
          f"warm-up {warmup['length_s']:g} s ({warmup['requests']} requests); stop reason: {capacity['stop_reason']}")  # fmt: skip
    print(f"search: {len(steps)} steps ({sum(s['kind'] == 'sustain' for s in steps)} sustain), "
          f"{sum(step_s):.0f} s replaying, {total_s:.0f} s in all (median step {median_s:.1f} s)")  # fmt: skip
    print("factors tried: " + ", ".join(f"x{s['factor']:g}{' sustain' if s['kind'] == 'sustain' else ''}"
                                        f" {s['verdict']}" for s in steps))  # fmt: skip
    point = capacity.get("slo_limit") if name == "limit" else capacity.get("knee")
    found = (point or {}).get("factor")
    per_factor = (
        statistics.median(s["offered"]["requests_per_s"] / s["factor"] for s in steps) if steps else 0
    )
    if found:
        start = capacity["settings"]["start_factor"]
        count = sweep_steps(start, found, precision)
        print(
            f"fixed sweep at the same precision: {count} steps (x{start:g} to x{found:.3g} in steps of "
            f"{precision:g} x it); its cost, not run but estimated as {count} x the search's median step "
            f"{median_s:.1f} s = {count * median_s:.0f} s"
        )
    model = model_rate / per_factor if per_factor else float("nan")
    print(f"{name} factor: {off_by(found, model)}; bracket {(point or {}).get('bracket')}")
    if name == "limit":
        print("  (the model's limit is where the mean TPOT, one step time, reaches the threshold; the search "
              "judges the upper bound of p95's CI, so it lands below)")  # fmt: skip
    else:
        print("  (the model's knee: the saturation rate over the offered rate per unit of factor, "
              f"{per_factor:.3g} req/s)")  # fmt: skip


if __name__ == "__main__":
    main()
