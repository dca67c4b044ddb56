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


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (("--memory", "lots; echo pwned"), "--memory 'lots; echo pwned': not a Kubernetes memory quantity"),
        (("--memory", "0Gi"), "not a Kubernetes memory quantity"),
        (("--cpus", "0"), "Invalid value for '--cpus'"),
        (("--cpus", "99999999999999999999"), "Invalid value for '--cpus'"),
        (("--target", "not a url"), "--target 'not a url': expected an http:// or https:// URL"),
        (("--target", "http://user:pw@staging:8000"), "the URL holds a user name or password"),
        (("--replay-arg=--api-key", "--replay-arg=sk-abc123456"), "pass --api-key-secret NAME"),
        (("--replay-arg=--api-key=sk-abc123456",), "--replay-arg --api-key: the key would be written"),
        (
            ("--replay-arg=--header", "--replay-arg=x-api-key: k1234567"),
            "--header-secret x-api-key:SECRET/KEY",
        ),
        (("--replay-arg=--header=Authorization: Bearer k1234567",), "--replay-arg --header 'Authorization'"),
        (("--replay-arg=--header=Cookie: s=k1234567",), "its value is a credential"),
        (("--header-secret", "x-api-key"), "expected NAME:SECRET/KEY"),
        (("--header-secret", "x-api-key:Bad_Secret/k"), "expected NAME:SECRET/KEY"),
    ],
)
def test_hostile_settings_are_one_line_exit_2_and_never_echo_a_secret(tmp_path, extra, message):
    result = run(tmp_path, *extra)
    assert result.exit_code == 2 and message in result.output, result.output
    assert "pw@" not in result.output and "k1234567" not in result.output and "sk-abc" not in result.output
    assert not (tmp_path / "k8s").exists()


def test_a_plain_header_is_still_passed(tmp_path):
    assert run(tmp_path, "--replay-arg=--header=X-Tenant: blue", "--memory", "1.5Gi").exit_code == 0
    container = docs(tmp_path, "replay.yaml")[2]["spec"]["template"]["spec"]["containers"][0]
    assert "'--header=X-Tenant: blue'" in container["command"][-1]
    assert container["resources"]["limits"]["memory"] == "1.5Gi"


def test_header_secrets_come_from_secrets_and_the_replayer_reads_them_from_its_environment(tmp_path):
    result = run(tmp_path, "--header-secret", "x-api-key:staging-keys/api-key", "--api-key-secret", "bearer")
    assert result.exit_code == 0, result.output
    _, _, replay = docs(tmp_path, "replay.yaml")
    container = replay["spec"]["template"]["spec"]["containers"][0]
    assert {
        "name": "LLMREPLAY_HEADER_0",
        "valueFrom": {"secretKeyRef": {"name": "staging-keys", "key": "api-key"}},
    } in (container["env"])
    assert "--header-from-env x-api-key:LLMREPLAY_HEADER_0" in container["command"][-1]
    kubernetes_validate.validate(replay, K8S_VERSION, strict=True)


def test_the_replayer_takes_a_header_from_the_environment_and_writes_only_its_name(monkeypatch):
    from llmreplay import options
    from replayer.config import ReplayConfig

    monkeypatch.setenv("LLMREPLAY_HEADER_0", "value-from-a-secret")
    values = {"target_url": "http://t:8000", "run_dir": "r", "env_headers": ("x-api-key:LLMREPLAY_HEADER_0",)}
    config = options.build(ReplayConfig, values, trace_path="t.parquet")
    assert config.sent_headers == (("x-api-key", "value-from-a-secret"),)
    public = config.public_dict()
    assert public["headers"] == ["x-api-key"] and "value-from-a-secret" not in repr(public)
    monkeypatch.delenv("LLMREPLAY_HEADER_0")
    with pytest.raises(Exception, match="the environment has no LLMREPLAY_HEADER_0"):
        options.build(ReplayConfig, values, trace_path="t.parquet")
