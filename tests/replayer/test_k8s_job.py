"""`llmreplay k8s-job`: manifests valid against the pinned Kubernetes schema, Indexed, guaranteed QoS."""

from __future__ import annotations

import kubernetes_validate
import pytest
import yaml
from click.testing import CliRunner

from llmreplay.cli import cli

K8S_VERSION = "1.30.0"  # the oldest Kubernetes with every field used here (backoffLimit, Indexed Jobs)


def run(tmp_path, *extra):
    args = [
        "k8s-job",
        "--trace", "/llmreplay/trace.parquet",
        "--target", "http://staging-vllm:8000",
        "--shards", "4",
        "--image", "registry.example/llmreplay:0.1",
        "--volume-claim", "llmreplay-data",
        "-o", str(tmp_path / "k8s"),
        *extra,
    ]  # fmt: skip
    return CliRunner().invoke(cli, args)


def docs(tmp_path, name):
    return list(yaml.safe_load_all((tmp_path / "k8s" / name).read_text()))


def test_every_manifest_is_valid_against_the_kubernetes_schema(tmp_path):
    result = run(tmp_path, "--namespace", "load", "--api-key-secret", "staging-key", "--replay-arg=--speed=2")
    assert result.exit_code == 0, result.output
    manifests = docs(tmp_path, "replay.yaml") + docs(tmp_path, "merge.yaml")
    assert [m["kind"] for m in manifests] == ["Service", "Job", "Job", "Job"]
    for manifest in manifests:
        kubernetes_validate.validate(manifest, K8S_VERSION, strict=True)  # raises on an unknown or bad field
        assert manifest["metadata"]["namespace"] == "load"


def test_the_replay_job_is_indexed_one_pod_a_shard_with_its_own_cores(tmp_path):
    assert run(tmp_path, "--cpus", "3").exit_code == 0
    service, barrier, replay = docs(tmp_path, "replay.yaml")
    spec = replay["spec"]
    assert spec["completionMode"] == "Indexed" and spec["completions"] == spec["parallelism"] == 4
    assert spec["backoffLimit"] == 0  # a shard restarted after the shared start would replay late
    container = spec["template"]["spec"]["containers"][0]
    assert (
        container["resources"]["requests"]
        == container["resources"]["limits"]
        == {"cpu": "3", "memory": "4Gi"}
    )
    command = container["command"][-1]
    assert '--shard "$JOB_COMPLETION_INDEX/4"' in command and "--workers 3" in command
    assert "--start-barrier http://llmreplay-barrier:8787" in command
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"] == barrier["spec"]["template"]["metadata"]["labels"]
    assert "--shards 4" in barrier["spec"]["template"]["spec"]["containers"][0]["command"][-1]


def test_the_merge_job_reads_every_shard(tmp_path):
    assert run(tmp_path).exit_code == 0
    (merge,) = docs(tmp_path, "merge.yaml")
    command = merge["spec"]["template"]["spec"]["containers"][0]["command"][-1]
    assert command.startswith("llmreplay merge ") and all(f"shard-{k}" in command for k in range(4))


def test_the_api_key_comes_from_a_secret_never_from_the_manifest(tmp_path):
    assert run(tmp_path, "--api-key-secret", "staging-key").exit_code == 0
    text = (tmp_path / "k8s" / "replay.yaml").read_text()
    assert "secretKeyRef" in text and "Bearer" not in text


@pytest.mark.parametrize(
    ("extra", "message"),
    [(("--name", "Bad_Name"), "must be a DNS label"), (("--shards", "0"), "--shards")],
)
def test_bad_settings_are_one_line_and_exit_2(tmp_path, extra, message):
    result = run(tmp_path, *extra)
    assert result.exit_code == 2 and message in result.output
    assert not (tmp_path / "k8s" / "replay.yaml").exists()
