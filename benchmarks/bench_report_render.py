"""Compare speed on large runs and the HTML report in a real headless Chromium (screenshot to look at).

Prints: compare wall time for N-row runs (median of repeats), HTML size and render time, and the
screenshot path. Usage: .venv/bin/python benchmarks/bench_report_render.py [--rows 100000] [--out DIR]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]  # the test helpers; ROOT first: tests/replayer is a package too

from compare_fixtures import Shape, latencies_ns, write_run, write_trace_file  # noqa: E402

from replayer.compare.sides import CompareConfig, compare_sides  # noqa: E402
from replayer.judge.slo import parse_slo  # noqa: E402
from replayer.measured.side import load_side  # noqa: E402
from replayer.report.html import write_html  # noqa: E402

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
)


def build_inputs(root: Path, rows: int) -> tuple[Path, Path]:
    shape = Shape(n=rows, seed=3, interval_ms=2.0, prompt_median_tokens=800, max_prompt_tokens=12_000)
    ttft, tpot = latencies_ns(shape, seed=1)
    trace = write_trace_file(root / "trace.parquet", shape, ttft, tpot)
    slow_ttft, slow_tpot = latencies_ns(shape, seed=2, ttft_ms=96.0, tpot_ms=10.5)
    errors = {i: "http_5xx" for i in range(0, rows, 200)}
    run = write_run(root / "run", shape, slow_ttft, slow_tpot, speed=2.0, errors=errors)
    return trace, run


def time_compare(trace: Path, run: Path, repeats: int) -> tuple[list[float], dict]:
    # the run is a 2x replay of the 1x trace: compared anyway, as the demo does
    config = CompareConfig(
        slos=(parse_slo("ttft_p95<=500ms"), parse_slo("e2e_p99<=20s")), allow_different_load=True
    )
    timings, result = [], None
    for _ in range(repeats):
        started = time.perf_counter()
        result = compare_sides(load_side(trace, "baseline"), load_side(run, "candidate"), config)
        timings.append(time.perf_counter() - started)
    return timings, result


def screenshot(html: Path, png: Path) -> tuple[float, str]:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        return float("nan"), "chromium not installed (apt-get install -y chromium)"
    with tempfile.TemporaryDirectory() as profile:
        started = time.perf_counter()
        done = subprocess.run(
            [
                chromium,
                *CHROMIUM_FLAGS,
                f"--user-data-dir={profile}",
                f"--screenshot={png}",
                "--window-size=1400,4000",
                html.resolve().as_uri(),
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        elapsed = time.perf_counter() - started
    if done.returncode != 0 or not png.is_file():
        return elapsed, f"chromium failed ({done.returncode}): {done.stderr[-500:]}"
    return elapsed, "ok"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "llmreplay-bench-report")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    trace, run = build_inputs(args.out, args.rows)
    timings, result = time_compare(trace, run, args.repeats)
    itl_count = result["latency"]["itl"]["candidate"]["count"]
    print(
        f"compare trace vs run, {args.rows:,} rows each ({itl_count:,} ITL gaps): "
        f"median {statistics.median(timings):.2f} s over {args.repeats} (min {min(timings):.2f} s)"
    )
    print(
        f"  verdict {result['verdict']['status']}, ttft p50 ratio "
        f"{result['latency']['ttft']['comparison']['p50']['ratio']:.3f}"
    )
    html = args.out / "report.html"
    started = time.perf_counter()
    write_html(result, html)
    print(
        f"HTML: {html} ({html.stat().st_size / 1024:.0f} KiB, rendered in {time.perf_counter() - started:.2f} s)"
    )
    png = args.out / "report.png"
    elapsed, status = screenshot(html, png)
    print(f"chromium screenshot: {status}, {elapsed:.1f} s -> {png}")
    text = html.read_text()
    external = [marker for marker in ("<script", "https://", "<link ") if marker in text]
    print(f"self-contained: {'yes' if not external else 'NO: ' + ', '.join(external)}")
    print(
        f"bootstrap check: ttft p99 CI {result['latency']['ttft']['comparison']['p99']['ci_low']:.3f}"
        f" - {result['latency']['ttft']['comparison']['p99']['ci_high']:.3f} (true ratio 1.2)"
    )
    assert np.isfinite(statistics.median(timings))


if __name__ == "__main__":
    main()
