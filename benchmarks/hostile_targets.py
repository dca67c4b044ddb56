"""The replay's memory against hostile targets (issue 26): an endless GET /v1/models, an endless
/metrics (named by --server-metrics, and the engine's default one), an endless SSE stream under
--duration/--grace. The target is tests/hostile_target.py in its own process on 127.0.0.1; the replay
is the real CLI, its process tree's RSS sampled every 50 ms (and run.json's figures when it ran).

    .venv/bin/python benchmarks/hostile_targets.py [--duration 10s] [--grace 5s]

Target: every replay process under 300 MB. Figures: docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from hostile_target import run_watched  # noqa: E402
from replay_helpers import content_record, replay_cmd, write_content_trace  # noqa: E402

KILL_MB = 3000  # the watch's own bound: a replay past it is stopped and reported


def serve(*args: str) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "hostile_target.py"), *args], stdout=subprocess.PIPE, text=True
    )
    port = proc.stdout.readline().split()[1]
    return proc, f"http://127.0.0.1:{port}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--duration", default="10s")
    parser.add_argument("--grace", default="5s")
    args = parser.parse_args()
    cases = [
        (
            "endless /v1/models, --engine openai",
            ("--models", "endless"),
            ("--engine", "openai", "--skip-preflight"),
        ),
        (
            "endless /metrics, --server-metrics",
            ("--metrics", "endless"),
            ("--engine", "openai", "--skip-preflight", "--server-metrics", "{url}/metrics"),
        ),
        (
            "endless /metrics, the engine's default",
            ("--metrics", "endless"),
            ("--engine", "vllm", "--skip-preflight"),
        ),
        (
            f"endless SSE stream, --duration {args.duration} --grace {args.grace}",
            ("--chat", "endless"),
            ("--engine", "openai", "--skip-preflight", "--duration", args.duration, "--grace", args.grace),
        ),
        ("10 MB unterminated SSE line", ("--chat", "long_line"), ("--engine", "openai", "--skip-preflight")),
    ]
    with tempfile.TemporaryDirectory() as tmp:
        trace = write_content_trace(Path(tmp) / "t.parquet", [content_record(i, i * 100.0) for i in range(3)])
        for n, (name, server_args, replay_args) in enumerate(cases):
            server, url = serve(*server_args)
            try:
                out = Path(tmp) / f"run{n}"
                cmd = replay_cmd(trace, url, out, *(a.replace("{url}", url) for a in replay_args))
                done = run_watched(cmd, 120, KILL_MB, cwd=ROOT)
            finally:
                server.terminate()
                server.wait(10)
            line = f"{name}: exit {done.returncode if done.killed is None else 'killed ' + done.killed}"
            line += f", peak RSS of any replay process {done.peak_rss_mb:.0f} MB"
            if (out / "run.json").exists():
                info = json.loads((out / "run.json").read_text())
                workers = ", ".join(f"{w['max_rss_mb']:.0f}" for w in info["workers"])
                line += (
                    f"; run.json: coordinator {info['coordinator_max_rss_mb']:.0f} MB, worker {workers} MB,"
                    f" stop_reason {info['stop_reason']}"
                )
            said = done.stderr.strip().splitlines()
            print(line)
            if said:
                print(f"    {said[-1][:200]}")


if __name__ == "__main__":
    main()
