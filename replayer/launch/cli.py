"""`llmreplay barrier` (the shared start of a multi-host replay) and `llmreplay k8s-job` (its manifests)."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field

import click

from llmreplay import options
from llmreplay.errors import BadInput
from llmreplay.options import duration, option, positive, url
from replayer.config import ScheduleConfig

NS_PER_S = 1_000_000_000


@dataclass(frozen=True, slots=True)
class BarrierConfig:
    """The start barrier's settings."""

    shards: int = option(type=int, required=True, check=positive, help="How many shards (hosts) to wait for.")
    host: str = option("127.0.0.1", help="Address to listen on (0.0.0.0 inside a pod).")
    port: int = option(8787, type=int, int_range=(0, 65535), help="Port to listen on.")
    lead_ns: int = option(
        15 * NS_PER_S,
        flags=("--lead",),
        help="Between the last shard ready and the shared start (time to read the start and arm).",
        **duration(),
    )
    timeout_ns: int = option(
        1800 * NS_PER_S,
        flags=("--timeout",),
        help="Give up (exit 1) when the shards have not all finished by then.",
        **duration(),
    )


@click.command("barrier")
@options.click_options(BarrierConfig)
def barrier(**values):
    """Wait for --shards hosts, give them one start a --lead after the last, serve the clock they measure.

    Exits 0 once every shard has reported done, 1 on --timeout.
    """
    from replayer.launch.barrier import BarrierState, serve_barrier

    config = options.build(BarrierConfig, values)
    state = BarrierState(shards=config.shards, lead_ns=config.lead_ns)
    try:
        server = serve_barrier(config.host, config.port, state)
    except OSError as exc:
        raise BadInput(f"--host {config.host} --port {config.port}: cannot listen ({exc.strerror})") from None
    host, port = server.server_address[:2]
    click.echo(f"barrier: waiting for {config.shards} shards on http://{host}:{port}", err=True)
    finished = state.all_done.wait(config.timeout_ns / NS_PER_S)
    time.sleep(0.2)  # the last /done answer leaves before the socket closes
    server.shutdown()
    if not finished:
        click.echo(
            f"barrier: timed out: {len(state.ready)} of {config.shards} ready, {len(state.done)} done",
            err=True,
        )
        raise SystemExit(1)
    click.echo(f"barrier: all {config.shards} shards done", err=True)


_QUANTITY = re.compile(r"(?:\d+|\d*\.\d+)(?:[KMGTPE]i|[kMGTPE])?")  # bytes: no milli, no exponent
_SECRET_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")  # a DNS subdomain
_SECRET_KEY = re.compile(r"[-._a-zA-Z0-9]{1,253}")
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # an HTTP token
# Headers whose values are credentials: never in a manifest (replay.yaml is read by anyone who can see
# the Job) nor in a command line.
SECRET_HEADERS = re.compile(
    r"(?i)(proxy-)?authorization|cookie|x-api-key|api[-_]?key|.*(token|secret|password).*"
)


def memory_quantity(text: str, flag: str) -> str:
    """A Kubernetes memory quantity (4Gi, 512Mi, 8G, 1.5Gi): the manifest is applied as written."""
    if not _QUANTITY.fullmatch(text.strip()) or float(re.sub(r"[^\d.]", "", text) or 0) <= 0:
        raise BadInput(f"{flag} {text!r}: not a Kubernetes memory quantity (write e.g. 4Gi, 512Mi or 8G)")
    return text.strip()


def parse_header_secrets(values: tuple[str, ...], flag: str) -> tuple[tuple[str, str, str], ...]:
    """`NAME:SECRET/KEY` strings -> (header, Secret, key)."""
    found = []
    for text in values:
        name, _, ref = (part.strip() for part in text.partition(":"))
        secret, _, key = ref.partition("/")
        valid = _HEADER_NAME.fullmatch(name) and _SECRET_NAME.fullmatch(secret) and _SECRET_KEY.fullmatch(key)
        if not valid:
            raise BadInput(
                f"{flag} {text!r}: expected NAME:SECRET/KEY, e.g. x-api-key:staging-keys/api-key "
                "(a header name, a Secret's name, a key in it)"
            )
        found.append((name, secret, key))
    return tuple(found)


def no_secret_args(values: tuple[str, ...], flag: str) -> tuple[str, ...]:
    """--replay-arg values, refusing the ones that would put a credential into replay.yaml."""
    for i, arg in enumerate(values):
        option_name, eq, inline = arg.partition("=")
        if option_name == "--api-key":
            raise BadInput(
                f"{flag} --api-key: the key would be written into replay.yaml in plain text; put it in a "
                "Secret (key api-key) and pass --api-key-secret NAME"
            )
        if option_name != "--header":
            continue
        header = inline if eq else (values[i + 1] if i + 1 < len(values) else "")
        name = header.partition(":")[0].strip()
        if SECRET_HEADERS.fullmatch(name):
            raise BadInput(
                f"{flag} --header {name!r}: its value is a credential and would be written into replay.yaml "
                f"in plain text; put it in a Secret and pass --header-secret {name}:SECRET/KEY"
            )
    return values


@dataclass(frozen=True, slots=True)
class K8sJobConfig:
    """What `k8s-job` writes manifests for (replayer.launch.k8s_job)."""

    trace: str = option(required=True, help="The trace's path inside the pods (on --volume-claim).")
    target: str = option(required=True, help="The staging engine, as the pods reach it.", **url())
    shards: int = option(type=int, required=True, check=positive, help="Hosts (pods) to replay on.")
    image: str = option(required=True, help="A container image with llmreplay installed.")
    volume_claim: str = option(
        required=True, metavar="PVC", help="A ReadWriteMany claim holding the trace and the runs."
    )
    out: str = option(
        flags=("-o", "--out"), required=True, metavar="DIR", help="Directory to write the manifests to."
    )
    name: str = option("llmreplay", help="Name of the Jobs and the Service (a DNS label).")
    namespace: str | None = option(None, help="Namespace of every object.")
    cpus: int = option(2, type=int, int_range=(1, 1024), help="Whole CPUs per shard pod (requests = limits).")
    memory: str = option(
        "4Gi",
        parse=memory_quantity,
        metavar="QUANTITY",
        help="Memory per shard pod (requests = limits), a Kubernetes quantity: 4Gi, 512Mi, 8G.",
    )
    runs_dir: str = option("/llmreplay/runs", help="Where the shards write their runs, inside the pods.")
    api_key_secret: str | None = option(
        None, help="A Secret with key `api-key`, passed as LLMREPLAY_API_KEY."
    )
    header_secrets: tuple[tuple[str, str, str], ...] = option(
        (),
        flags=("--header-secret",),
        multiple=True,
        parse=parse_header_secrets,
        metavar="NAME:SECRET/KEY",
        help="Send header NAME with the value of KEY in the Secret SECRET (repeatable; never in the manifest).",
    )
    replay_args: tuple[str, ...] = option(
        (),
        flags=("--replay-arg",),
        multiple=True,
        parse=no_secret_args,
        help="An argument for every shard's replay (repeatable; secrets go in --api-key-secret or "
        "--header-secret).",
    )


@click.command("k8s-job")
@options.click_options(K8sJobConfig)
def k8s_job(**values):
    """Write the Kubernetes manifests of a multi-host replay: barrier, Indexed Job, merge Job.

    Apply replay.yaml, wait for the Job, then apply merge.yaml (docs/howto-distributed.md).
    """
    from pathlib import Path

    import yaml

    from llmreplay.output_paths import make_output_dir, write_atomic
    from replayer.launch.k8s_job import K8sJobSettings, merge_manifest, replay_manifests

    config = options.build(K8sJobConfig, values)
    _check_dns_label(config.name)
    settings = K8sJobSettings(
        name=config.name,
        image=config.image,
        trace=config.trace,
        target=config.target,
        shards=config.shards,
        out_dir=config.runs_dir.rstrip("/"),
        volume_claim=config.volume_claim,
        namespace=config.namespace,
        cpus=config.cpus,
        memory=config.memory,
        replay_args=config.replay_args,
        api_key_secret=config.api_key_secret,
        header_secrets=config.header_secrets,
    )
    out = make_output_dir(config.out)
    for name, docs in (
        ("replay.yaml", replay_manifests(settings)),
        ("merge.yaml", [merge_manifest(settings)]),
    ):
        write_atomic(Path(out) / name, yaml.safe_dump_all(docs, sort_keys=False), force=True)
    click.echo(f"manifests written to {out}: replay.yaml (apply first), merge.yaml (once the Job completed)")


def _check_dns_label(name: str) -> None:
    if not re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,40}[a-z0-9])?", name):
        raise BadInput(f"--name {name!r}: must be a DNS label (lowercase letters, digits, '-'; at most 42)")


@dataclass(frozen=True, slots=True)
class MergeConfig:
    """What `merge` needs besides the shards' run directories."""

    out: str = option(flags=("-o", "--out"), required=True, metavar="DIR", help="Run directory to create.")
    clock_budget_ns: int | None = option(
        None,
        flags=("--clock-budget",),
        help="Largest cross-host clock error bound the merged run may carry; above it the run is flagged "
        "(default: 10% of the merged schedule's median inter-arrival).",
        **duration(),
    )
    allow_missing_shards: bool = option(
        False,
        flag_value=True,
        help="Merge the shards given even when some are missing (the run is incomplete).",
    )


@click.command("merge")
@click.argument("runs", nargs=-1, required=True, type=click.Path())
@options.click_options(MergeConfig)
def merge(runs, **values):
    """Merge the shard runs of one multi-host replay into one run: raw rows, every statistic recomputed.

    Exit 1 when the merged run's verdict fails or its cross-host clock bound is over --clock-budget.
    """
    from pathlib import Path

    from llmreplay.output_paths import check_output_dir
    from replayer.coordinator import refuse_used_run_dir
    from replayer.results.merge_runs import load_shard_runs, write_merged_run

    config = options.build(MergeConfig, values)
    out = check_output_dir(config.out)
    refuse_used_run_dir(out)
    shard_runs = load_shard_runs(list(runs))
    summary, clock = write_merged_run(
        shard_runs, Path(out), config.clock_budget_ns, config.allow_missing_shards
    )
    headline = summary["verdict"]["headline"]
    bound = clock["cross_host_bound_ns"]
    bound_text = "unmeasured" if bound is None else f"{bound / 1e6:.3f} ms"
    budget = clock["budget_ns"]
    click.echo(f"merged {len(shard_runs)} shards into {out}: {summary['sent']} requests sent; {headline}")
    click.echo(
        f"cross-host clock bound {bound_text} (budget {'-' if budget is None else f'{budget / 1e6:.3f} ms'}): "
        f"{'within' if clock['within_budget'] else 'OVER BUDGET or unmeasured: timings across hosts are suspect'}"
    )
    exit_code = summary["verdict"]["exit_code"]
    raise SystemExit(exit_code or (0 if clock["within_budget"] else 1))


@dataclass(frozen=True, slots=True)
class PlanConfig:
    """How `plan` splits a trace for --shards hosts (the schedule flags are replay's)."""

    shards: int = option(type=int, required=True, check=positive, help="Hosts to split the sessions over.")
    cores_per_host: int = option(
        1,
        type=int,
        check=positive,
        help="Replay cores (--workers) per host, for the ceiling each shard is held to.",
    )
    out: str | None = option(None, flags=("-o", "--out"), metavar="FILE", help="Write the plan as JSON here.")
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)


@click.command("plan")
@click.argument("trace", type=click.Path())
@options.click_options(PlanConfig)
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON.")
def plan(trace, as_json, **values):
    """Split TRACE's sessions over --shards hosts as `replay --shard K/N` will, and show each shard's load.

    Each shard's busiest second is set against one host's measured ceiling (150 req/s of long streams a core).
    """
    import json

    from llmreplay.output_paths import write_atomic
    from replayer.plan.host_shards import plan_shards, trace_fingerprint
    from replayer.plan.schedule import build_schedule, schedule_input
    from replayer.plan.trace_rows import read_trace_rows

    config = options.build(PlanConfig, values)
    rows = read_trace_rows(trace)
    schedule = build_schedule(schedule_input(rows.table), config.schedule)
    split = plan_shards(schedule, rows.table.column("session_id"), config.shards, config.schedule.seed)
    document = {
        "trace": trace,
        "trace_fingerprint": trace_fingerprint(rows.table),
        "seed": config.schedule.seed,
        "planned": len(schedule),
        **split.as_dict(cores_per_host=config.cores_per_host),
    }
    if config.out:
        write_atomic(config.out, json.dumps(document, indent=2) + "\n", force=True)
    if as_json:
        click.echo(json.dumps(document, indent=2))
        return
    ceiling = document["host_ceiling_requests_per_s"]
    click.echo(
        f"{len(schedule):,} planned requests over {config.shards} shards (a host's ceiling {ceiling} req/s)"
    )
    for k in range(config.shards):
        share = document["peak_share_of_ceiling"][k]
        warning = "  over one host's ceiling: use more shards or --workers" if share > 1 else ""
        click.echo(
            f"  shard {k}/{config.shards}: {split.sessions[k]:,} sessions, {split.requests[k]:,} requests, "
            f"busiest second {split.peak_per_s[k]} req/s ({share:.0%} of the ceiling){warning}"
        )
