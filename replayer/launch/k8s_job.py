"""Kubernetes manifests of a multi-host replay: a start barrier (a one-pod Job behind a headless Service)
and an Indexed Job whose completion index is the shard, then a merge Job to apply once it completed.

Pure: settings in, manifest dicts out (the CLI writes them as YAML). Guaranteed QoS (requests == limits,
whole CPUs) so each pacing core is the pod's own; shards spread over nodes; no retries (a shard that
restarts after the shared start would replay late).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

BARRIER_PORT = 8787
APP_LABEL = "app.kubernetes.io/name"
COMPONENT_LABEL = "app.kubernetes.io/component"


@dataclass(frozen=True, slots=True)
class K8sJobSettings:
    """What the manifests are made of; `replay_args` are passed to every shard's `llmreplay replay`."""

    name: str
    image: str
    trace: str  # the trace's path inside the pods (on the shared volume)
    target: str
    shards: int
    out_dir: str  # where the shards write their runs (on the shared volume)
    volume_claim: str  # a ReadWriteMany PVC holding the trace and the results
    namespace: str | None = None
    cpus: int = 2
    memory: str = "4Gi"
    workers: int | None = None  # per shard; default: the pod's CPUs
    lead_s: int = 15  # between the last shard ready and the shared start
    barrier_timeout_s: int = 1800
    replay_args: tuple[str, ...] = field(default_factory=tuple)
    api_key_secret: str | None = None  # a Secret holding `api-key`, passed as LLMREPLAY_API_KEY
    header_secrets: tuple[tuple[str, str, str], ...] = ()  # (header, Secret, key): env, --header-from-env

    @property
    def barrier_url(self) -> str:
        return f"http://{self.name}-barrier:{BARRIER_PORT}"

    @property
    def mount(self) -> str:
        return "/llmreplay"


def replay_manifests(s: K8sJobSettings) -> list[dict]:
    """The barrier Service, the barrier Job and the Indexed replay Job, in apply order."""
    return [_barrier_service(s), _barrier_job(s), _replay_job(s)]


def merge_manifest(s: K8sJobSettings) -> dict:
    """The Job that merges the shards' runs into one (apply it once the replay Job is complete)."""
    runs = " ".join(shlex.quote(f"{s.out_dir}/shard-{k}") for k in range(s.shards))
    command = f"llmreplay merge {runs} -o {shlex.quote(s.out_dir + '/merged')}"
    return _job(s, f"{s.name}-merge", "merge", command, completions=None, cpus=1, memory=s.memory)


def _barrier_service(s: K8sJobSettings) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(s, f"{s.name}-barrier", "barrier"),
        "spec": {
            "clusterIP": "None",
            "selector": _labels(s, "barrier"),
            "ports": [{"name": "barrier", "port": BARRIER_PORT, "targetPort": BARRIER_PORT}],
        },
    }


def _barrier_job(s: K8sJobSettings) -> dict:
    command = (
        f"llmreplay barrier --shards {s.shards} --host 0.0.0.0 --port {BARRIER_PORT} "
        f"--lead {s.lead_s}s --timeout {s.barrier_timeout_s}s"
    )
    job = _job(s, f"{s.name}-barrier", "barrier", command, completions=None, cpus=1, memory="256Mi")
    container = job["spec"]["template"]["spec"]["containers"][0]
    container["ports"] = [{"containerPort": BARRIER_PORT, "name": "barrier"}]
    container["readinessProbe"] = {"httpGet": {"path": "/time", "port": BARRIER_PORT}, "periodSeconds": 2}
    return job


def _replay_job(s: K8sJobSettings) -> dict:
    workers = s.workers or s.cpus
    args = [
        "llmreplay replay",
        shlex.quote(s.trace),
        "--target",
        shlex.quote(s.target),
        f'--shard "$JOB_COMPLETION_INDEX/{s.shards}"',
        "--start-barrier",
        shlex.quote(s.barrier_url),
        "--workers",
        str(workers),
        "-o",
        f'"{s.out_dir}/shard-$JOB_COMPLETION_INDEX"',
        *(shlex.quote(a) for a in s.replay_args),
        *(f"--header-from-env {shlex.quote(f'{header}:{env}')}" for header, env in _header_envs(s)),
    ]
    job = _job(s, s.name, "replay", " ".join(args), completions=s.shards, cpus=s.cpus, memory=s.memory)
    job["spec"].update({"completionMode": "Indexed", "parallelism": s.shards})
    pod = job["spec"]["template"]["spec"]
    pod["affinity"] = {
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 100,
                    "podAffinityTerm": {
                        "labelSelector": {"matchLabels": _labels(s, "replay")},
                        "topologyKey": "kubernetes.io/hostname",
                    },
                }
            ]
        }
    }
    env = [_secret_env("LLMREPLAY_API_KEY", s.api_key_secret, "api-key")] if s.api_key_secret else []
    for (_, secret, key), (_, name) in zip(s.header_secrets, _header_envs(s), strict=True):
        env.append(_secret_env(name, secret, key))  # the replayer reads it: never in argv or the manifest
    if env:
        pod["containers"][0]["env"] = env
    return job


def _header_envs(s: K8sJobSettings) -> list[tuple[str, str]]:
    """(header, environment variable) of each --header-secret."""
    return [(header, f"LLMREPLAY_HEADER_{i}") for i, (header, _, _) in enumerate(s.header_secrets)]


def _secret_env(name: str, secret: str, key: str) -> dict:
    return {"name": name, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}}


def _job(s: K8sJobSettings, name: str, component: str, command: str, *, completions, cpus, memory) -> dict:
    resources = {"cpu": str(cpus), "memory": memory}
    spec: dict = {
        "backoffLimit": 0,
        "ttlSecondsAfterFinished": 86400,
        "template": {
            "metadata": {"labels": _labels(s, component)},
            "spec": {
                "restartPolicy": "Never",
                "containers": [
                    {
                        "name": component,
                        "image": s.image,
                        "command": ["/bin/sh", "-c", command],
                        "resources": {"requests": resources, "limits": resources},
                        "volumeMounts": [{"name": "data", "mountPath": s.mount}],
                    }
                ],
                "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": s.volume_claim}}],
            },
        },
    }
    if completions is not None:
        spec["completions"] = completions
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": _metadata(s, name, component), "spec": spec}


def _metadata(s: K8sJobSettings, name: str, component: str) -> dict:
    meta: dict = {"name": name, "labels": _labels(s, component)}
    if s.namespace:
        meta["namespace"] = s.namespace
    return meta


def _labels(s: K8sJobSettings, component: str) -> dict:
    return {APP_LABEL: "llmreplay", "app.kubernetes.io/instance": s.name, COMPONENT_LABEL: component}
