"""`llmreplay demo`: the whole story on 127.0.0.1 — record, anonymize, replay on a slower engine, compare.
Every stage is a subprocess call to the llmreplay CLI, so the core imports no stage; a stage whose
command is not installed is skipped, said so, and the demo starts from the bundled sample trace."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import click

from llmreplay import options
from llmreplay.errors import BadInput
from llmreplay.options import factor, option
from llmreplay.processes import stop_process

SAMPLE_TRACE = Path(__file__).resolve().parent.parent / "samples" / "content_multiturn.parquet"
SAMPLE_WINDOW_S = 90  # trace seconds of the sample to replay, so the demo stays within minutes
MARKER = ".llmreplay-demo"
MARKER_TEXT = "An output of `llmreplay demo`: every demo run clears what the demo wrote here.\n"
# Everything a run writes in its output directory (besides MARKER): what the next run removes.
DEMO_ENTRIES = (
    "logs", ".mitmproxy", "recorder.key", "recorded", "anonymize.key", "anonymized.parquet", "run", "report.html",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class DemoConfig:
    out_dir: Path = option(
        flags=("-o", "--out"),
        required=True,
        metavar="DIR",
        parse=lambda text, flag: Path(text).expanduser(),
        help="Directory for everything: new, empty or an earlier demo's (cleared first).",
    )
    speed: float = option(
        1.0,
        type=float,
        check=factor,
        show=lambda speed: f"{speed:g}, production's pace",
        help="Replay speed against the slow sim.",
    )  # production's pace: the comparison then judges the engine, not a heavier load
    conversations: int = 16
    turns: int = 3
    slos: tuple[str, ...] = ("ttft_p95<=500ms", "e2e_p99<=20s")
    startup_timeout_s: float = 60.0


@dataclass
class Processes:
    """Every process the demo starts; `stop_all` ends them (SIGTERM, then SIGKILL)."""

    log_dir: Path
    procs: list[tuple[str, subprocess.Popen]] = field(default_factory=list)

    def start(self, name: str, args: list[str]) -> subprocess.Popen:
        log = open(self.log_dir / f"{name}.log", "wb")
        proc = subprocess.Popen(_cli(*args), stdout=log, stderr=subprocess.STDOUT)
        self.procs.append((name, proc))
        return proc

    def stop(self, proc: subprocess.Popen, grace_s: float = 15.0) -> None:
        stop_process(proc, grace_s)

    def stop_all(self) -> None:
        for _, proc in reversed(self.procs):
            self.stop(proc)


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "llmreplay.cli", *args]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _available(command: str) -> bool:
    done = subprocess.run(_cli(command, "--help"), capture_output=True, timeout=60)
    return done.returncode == 0


def _wait_until(ready, what: str, proc: subprocess.Popen, log: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise click.ClickException(f"{what} exited with {proc.returncode}; see {log}")
        if ready():
            return
        time.sleep(0.2)
    raise click.ClickException(f"{what} not ready after {timeout_s:.0f}s; see {log}")


def _http_ok(url: str):
    def ready() -> bool:
        try:
            with urllib.request.urlopen(url, timeout=1) as response:
                return response.status == 200
        except OSError:
            return False

    return ready


def _port_open(port: int):
    def ready() -> bool:
        with socket.socket() as sock:
            sock.settimeout(0.5)
            return sock.connect_ex(("127.0.0.1", port)) == 0

    return ready


def _say(text: str) -> None:
    click.echo(f"[demo] {text}", err=False)


def prepare_out_dir(out: Path) -> None:
    """Make `out` a clean output of the demo's own: a new or empty directory gets the marker; a marked
    one loses what an earlier run wrote (DEMO_ENTRIES only: other files in it stay). BadInput (exit 2)
    for a non-empty directory without the marker, which may be anyone's and is left untouched."""
    from llmreplay.output_paths import make_output_dir

    marker = out / MARKER
    if out.is_dir() and not marker.is_file() and any(out.iterdir()):
        raise BadInput(
            f"--out {out}: not empty and not a demo output (no {MARKER} file in it); the demo clears its "
            "output directory before each run, so give a new or empty directory"
        )
    make_output_dir(out, "--out")
    marker.write_text(MARKER_TEXT)
    for name in DEMO_ENTRIES:
        path = out / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.is_symlink() or path.exists():
            path.unlink()  # a link itself goes, never what it points to


def run_demo(config: DemoConfig) -> Path:
    """Run every stage in a cleared output directory; returns the HTML report's path. Processes are
    always stopped."""
    out = config.out_dir
    prepare_out_dir(out)
    logs = out / "logs"
    logs.mkdir()
    processes = Processes(logs)
    started = time.monotonic()
    try:
        fast_url, slow_url = _start_sims(processes, config)
        trace, baseline, replay_args = _production_trace(processes, config, fast_url)
        run_dir = out / "run"
        _replay(trace, slow_url, run_dir, config, replay_args)
        report = out / "report.html"
        _compare(baseline, run_dir, report, config)
    finally:
        processes.stop_all()
    _say(f"finished in {time.monotonic() - started:.0f}s; every process stopped; run directory {out}")
    return report


def _start_sims(processes: Processes, config: DemoConfig) -> tuple[str, str]:
    urls = {}
    for profile in ("fast", "slow"):
        port = _free_port()
        proc = processes.start(
            f"sim-{profile}", ["sim", "--host", "127.0.0.1", "--port", str(port), "--profile", profile]
        )
        urls[profile] = (f"http://127.0.0.1:{port}", proc)
    for profile, (url, proc) in urls.items():
        _wait_until(
            _http_ok(f"{url}/health"),
            f"sim ({profile})",
            proc,
            processes.log_dir / f"sim-{profile}.log",
            config.startup_timeout_s,
        )
    _say(f"sims up: fast (production stand-in) {urls['fast'][0]}, slow (the new engine) {urls['slow'][0]}")
    return urls["fast"][0], urls["slow"][0]


def _production_trace(
    processes: Processes, config: DemoConfig, fast_url: str
) -> tuple[Path, Path, list[str]]:
    """The trace to replay and the baseline to compare against, recorded live when the recorder exists."""
    out = config.out_dir
    replay_args: list[str] = []
    if _available("record"):
        recorded = _record(processes, config, fast_url)
    else:
        _say(
            "SKIPPED record: `llmreplay record --help` fails (recorder not installed); "
            f"starting from the bundled sample trace {SAMPLE_TRACE}"
        )
        if not SAMPLE_TRACE.is_file():
            raise click.ClickException(f"{SAMPLE_TRACE}: bundled sample trace missing")
        recorded = SAMPLE_TRACE
        # The sample's models are not served by the sim, and its hours are cut to a short window.
        replay_args = ["--model", "sim-model", "--to", str(SAMPLE_WINDOW_S)]
    if _available("anonymize"):
        anonymized = out / "anonymized.parquet"
        _run_stage(
            "anonymize",
            [
                "anonymize",
                str(recorded),
                "-o",
                str(anonymized),
                "--key-file",
                str(out / "anonymize.key"),
                "--verify",
                "--force",
                "--quiet",
            ],
            out / "logs",
        )
        _say(f"anonymized (verified: no leaks, same token lengths, same prefix sharing) -> {anonymized}")
        return anonymized, anonymized, replay_args
    _say(
        "SKIPPED anonymize: `llmreplay anonymize --help` fails (anonymizer not installed); "
        "replaying the recorded trace as is"
    )
    return recorded, recorded, replay_args


def _record(processes: Processes, config: DemoConfig, fast_url: str) -> Path:
    from llmreplay.demo_traffic import TrafficPlan, drive

    out = config.out_dir / "recorded"
    port = _free_port()
    args = [
        "record",
        "--upstream",
        fast_url,
        "--listen",
        f"127.0.0.1:{port}",
        "-o",
        str(out),
        "--content",
        "--key-file",
        str(config.out_dir / "recorder.key"),
        "--confdir",
        str(config.out_dir / ".mitmproxy"),
    ]
    proc = processes.start("record", args)
    _wait_until(
        _port_open(port), "recorder", proc, processes.log_dir / "record.log", config.startup_timeout_s
    )
    plan = TrafficPlan(conversations=config.conversations, turns=config.turns)
    _say(
        f"recorder up on 127.0.0.1:{port} in front of the fast sim; sending {plan.conversations} conversations "
        f"x {plan.turns} turns of client traffic"
    )
    result = drive(f"http://127.0.0.1:{port}", plan)
    _say(f"client traffic done: {result.requests} requests, {result.ok} ok, {result.failed} failed")
    processes.stop(proc, grace_s=30.0)
    files = sorted(out.glob("*.parquet"))
    if not files:
        raise click.ClickException(
            f"the recorder wrote no trace file in {out}; see {processes.log_dir / 'record.log'}"
        )
    _say(f"recorded {len(files)} trace file(s) -> {out}")
    return out


def _run_stage(name: str, args: list[str], log_dir: Path, ok_codes: tuple[int, ...] = (0,)) -> int:
    with open(log_dir / f"{name}.log", "wb") as log:
        done = subprocess.run(_cli(*args), stdout=log, stderr=subprocess.STDOUT)
    if done.returncode not in ok_codes:
        raise click.ClickException(
            f"{name} failed with exit status {done.returncode}; see {log_dir / (name + '.log')}"
        )
    return done.returncode


def _replay(trace: Path, slow_url: str, run_dir: Path, config: DemoConfig, extra: list[str]) -> None:
    if not _available("replay"):
        raise click.ClickException(
            "`llmreplay replay --help` fails: the replayer is not installed; cannot continue"
        )
    pace = "at production's pace" if config.speed == 1 else f"at {config.speed:g}x"
    _say(f"replaying {pace} against the slow sim (the new engine) -> {run_dir}")
    args = [
        "replay",
        str(trace),
        "--target",
        slow_url,
        "-o",
        str(run_dir),
        "--speed",
        str(config.speed),
        "--quiet",
        *extra,
    ]
    # Exit 1 means the replay ran but flagged itself (for example its dispatch lag bound): compare reports it.
    code = _run_stage("replay", args, config.out_dir / "logs", ok_codes=(0, 1))
    if not (run_dir / "results.parquet").is_file():
        raise click.ClickException(
            f"replay wrote no results.parquet; see {config.out_dir / 'logs' / 'replay.log'}"
        )
    if code == 1:
        _say(
            "note: the replay flagged itself (exit 1), see logs/replay.log; compare's fidelity section says why"
        )


def _compare(baseline: Path, run_dir: Path, report: Path, config: DemoConfig) -> None:
    """compare's gate on the replay; its exit 1 is a verdict (NO-GO) only when it wrote its report
    (a crash exits 1 too, without one)."""
    help_text = subprocess.run(_cli("compare", "--help"), capture_output=True, text=True, timeout=60)
    if help_text.returncode != 0:
        raise click.ClickException(
            "`llmreplay compare --help` fails: compare is not installed; cannot continue"
        )
    # The baseline is the anonymized trace: production's own timings, under the same request ids as
    # the replay (anonymize renames ids, so the original recording shares none with the run).
    _say(f"comparing production ({baseline.name}: its recorded timings) with the replay on the new engine")
    args = [str(baseline), str(run_dir), "--html", str(report)]
    args += [arg for slo in config.slos for arg in ("--slo", slo)]
    if config.speed != 1 and "--allow-different-load" in help_text.stdout:
        args.append("--allow-different-load")
        _say(f"note: replayed at {config.speed:g}x, so latency is judged at a heavier load than production's")
    report.unlink(missing_ok=True)
    done = subprocess.run(_cli("compare", *args))
    if done.returncode not in (0, 1) or not report.is_file():
        raise click.ClickException(
            f"compare failed with exit status {done.returncode}"
            + ("" if report.is_file() else f" and wrote no report {report}")
        )
    if done.returncode:
        _say(
            "verdict: NO-GO (compare exit 1; its reasons are above) - as designed: the new engine is the "
            "slow sim, and the gate catches it"
        )
    else:
        _say("verdict: GO (compare exit 0) - unexpected here: the slow sim should have regressed")


@click.command()
@options.click_options(DemoConfig)
def demo(**values) -> None:
    """Record sample traffic at a fast sim, anonymize it, replay it on a slow sim, compare, report.

    OUT is cleared first (only what the demo wrote there). Exit 0 whatever the verdict (the slow
    sim's NO-GO, compare's exit 1, is the expected answer), 1 when a stage fails, 2 on bad input.
    """
    config = options.build(DemoConfig, values)
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    report = run_demo(config)
    click.echo(f"HTML report: {report.resolve()}")
