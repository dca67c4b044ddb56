"""`replay --ray ADDRESS --shards N`: one shard per Ray node (a STRICT_SPREAD placement group), each an
ordinary `llmreplay replay --shard K/N --start-barrier URL` subprocess that an actor only starts and
collects; Ray never touches a request. The runs come back as files and are merged like any others.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from llmreplay.errors import BadInput
from llmreplay.run_format import RESULTS_FILE, RUN_FILE, SERVER_METRICS_FILE

RUN_FILES = (RESULTS_FILE, RUN_FILE, SERVER_METRICS_FILE)
BARRIER_LEAD_NS = 5_000_000_000
PLACEMENT_TIMEOUT_S = 60
STDERR_TAIL = 2000


@dataclass(frozen=True, slots=True)
class ShardRun:
    shard: int
    node: str
    exit_code: int
    stderr_tail: str
    files: dict[str, bytes]  # the run directory's files, by name


class ShardActor:
    """Lives on one node: runs one shard's replay as a subprocess and hands its run directory back."""

    def run(self, shard: int, argv: list[str], scratch: str, cwd: str, env: dict | None = None) -> ShardRun:
        """`env`: the secrets (secret_env), added to the subprocess's environment, never to its argv."""
        out = Path(scratch) / f"shard-{shard}"
        done = subprocess.run(
            [sys.executable, "-m", "llmreplay.cli", "replay", *argv, "-o", str(out)],
            capture_output=True,
            text=True,
            check=False,
            cwd=cwd if Path(cwd).is_dir() else None,  # the driver's, where the node shares its disk
            env={**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1"},
        )
        files = {name: (out / name).read_bytes() for name in RUN_FILES if (out / name).is_file()}
        return ShardRun(shard, socket.gethostname(), done.returncode, done.stderr[-STDERR_TAIL:], files)


def run_on_ray(
    address: str, shards: int, cpus_per_shard: int, shard_argv, out_dir: Path, env: dict | None = None
) -> list:
    """Place `shards` actors on distinct nodes, run `shard_argv(k)` on each with `env` added to its
    environment, write each run to `out_dir/shard-K/`; returns the ShardRuns. One line when the cluster
    cannot place them. `env` (the secrets) goes as a task argument: Ray's runtime_env env_vars would
    show in every node's process list (setup_worker.py carries the serialized runtime_env in its argv)."""
    try:
        import ray
        from ray.util.placement_group import placement_group, remove_placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
    except ImportError:
        raise BadInput("--ray: Ray is not installed (pip install 'llmreplay[ray]')") from None
    ray.init(address=address, logging_level="ERROR", log_to_driver=False)
    try:
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        if len(nodes) < shards:
            raise BadInput(
                f"--ray {address}: {shards} shards need {shards} nodes, the cluster has {len(nodes)}"
            )
        group = placement_group([{"CPU": cpus_per_shard}] * shards, strategy="STRICT_SPREAD")
        ready, _ = ray.wait([group.ready()], timeout=PLACEMENT_TIMEOUT_S)
        if not ready:
            remove_placement_group(group)
            raise BadInput(
                f"--ray {address}: cannot place {shards} shards of {cpus_per_shard} CPUs on distinct nodes "
                f"within {PLACEMENT_TIMEOUT_S} s"
            )
        actor_class = ray.remote(num_cpus=cpus_per_shard)(ShardActor)
        actors = [
            actor_class.options(
                scheduling_strategy=PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=k),
            ).remote()
            for k in range(shards)
        ]
        scratch, cwd = str(out_dir.resolve() / ".ray-scratch"), os.getcwd()
        runs = ray.get(
            [actor.run.remote(k, shard_argv(k), scratch, cwd, env) for k, actor in enumerate(actors)]
        )
        remove_placement_group(group)
    finally:
        ray.shutdown()
    for run in runs:
        target = out_dir / f"shard-{run.shard}"
        target.mkdir(parents=True, exist_ok=True)
        for name, data in run.files.items():
            (target / name).write_bytes(data)
    return runs


SECRET_FLAGS = ("--api-key", "--header", "--header-from-env")  # their values go through the environment
HEADER_ENV = "LLMREPLAY_HEADER_"  # + i: the value of the i-th header on a node


def shard_argv(
    argv: list[str], shard: int, shards: int, barrier_url: str, header_names: tuple[str, ...] = ()
) -> list[str]:
    """`replay`'s own arguments for one shard: --ray, --shards, -o and the secret-bearing flags taken
    out, the shard's added, and each header named as coming from the environment (secret_env)."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
            continue
        name = arg.split("=", 1)[0]
        if name in ("--ray", "--shards", "-o", "--out", *SECRET_FLAGS):
            skip = "=" not in arg
            continue
        out.append(arg)
    for i, header in enumerate(header_names):
        out += ["--header-from-env", f"{header}:{HEADER_ENV}{i}"]
    return [*out, "--shard", f"{shard}/{shards}", "--start-barrier", barrier_url]


def secret_env(config) -> dict[str, str]:
    """The API key (from the flag or the driver's environment) and the header values, as the nodes'
    environment: argv shows in every node's process list, the environment does not."""
    env = {f"{HEADER_ENV}{i}": value for i, (_, value) in enumerate(config.sent_headers)}
    if config.api_key:
        env["LLMREPLAY_API_KEY"] = config.api_key
    return env


def replay_on_ray(config, argv: list[str], console) -> tuple[int, Path, dict]:
    """`replay --ray ADDRESS --shards N -o DIR`: shards on N nodes under DIR/shards/, merged into DIR;
    returns the exit code, DIR and the merged run's summary."""
    from replayer.coordinator import refuse_used_run_dir
    from replayer.launch.barrier import BarrierState, serve_barrier
    from replayer.results.merge_runs import load_shard_runs, write_merged_run

    multihost = config.multihost
    if multihost.shard is not None or multihost.start_at_ns is not None or multihost.start_barrier:
        raise BadInput("--ray: sets each node's --shard and --start-barrier itself; give neither")
    if not multihost.shards or multihost.shards < 1:
        raise BadInput("--ray: needs --shards N (how many nodes to replay on)")
    out = Path(config.run_dir)
    shards_dir = out / "shards"
    refuse_used_run_dir(out)
    if shards_dir.exists():
        raise BadInput(f"-o {out}: holds shards/ of an earlier --ray replay; choose a new -o directory")
    shards_dir.mkdir(parents=True, exist_ok=True)
    state = BarrierState(shards=multihost.shards, lead_ns=BARRIER_LEAD_NS)
    host = driver_address(multihost.ray_address)
    server = serve_barrier(host, 0, state)
    barrier_url = f"http://{host}:{server.server_address[1]}"
    header_names = tuple(name for name, _ in config.sent_headers)
    try:
        runs = run_on_ray(
            multihost.ray_address,
            multihost.shards,
            config.workers,
            lambda k: shard_argv(argv, k, multihost.shards, barrier_url, header_names),
            shards_dir,
            secret_env(config),
        )
    finally:
        server.shutdown()
        server.server_close()
    for run in runs:
        if run.exit_code not in (0, 1) and console is not None:
            console.print(f"shard {run.shard} on {run.node}: exit {run.exit_code}: {run.stderr_tail.strip()}")
    failed = [r for r in runs if RESULTS_FILE not in r.files]
    if failed:
        raise BadInput(
            f"--ray: shard {failed[0].shard} on {failed[0].node} wrote no run (exit {failed[0].exit_code}): "
            f"{failed[0].stderr_tail.strip().splitlines()[-1] if failed[0].stderr_tail.strip() else 'no message'}"
        )
    shard_runs = load_shard_runs([str(shards_dir / f"shard-{r.shard}") for r in runs])
    summary, clock = write_merged_run(shard_runs, out, None, allow_missing=False)
    return summary["verdict"]["exit_code"] or (0 if clock["within_budget"] else 1), out, summary


def driver_address(ray_address: str) -> str:
    """Where the nodes reach this process's barrier: loopback for a cluster on this machine, else the
    address this host uses toward the cluster's head."""
    head = ray_address.removeprefix("ray://").rsplit(":", 1)[0]
    if head in ("127.0.0.1", "localhost", "auto", ""):
        return "127.0.0.1"
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((head, 9))  # no packet is sent: only the route is chosen
        return probe.getsockname()[0]
