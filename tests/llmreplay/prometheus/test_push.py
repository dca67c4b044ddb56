"""A finished run's figures: from run.json's summary in base units, encoded as remote-write 1.0 wants
(read back with the same protobuf messages and snappy), and a push that fails is one warning line."""

from __future__ import annotations

import json

import cramjam
import pytest
from compare_fixtures import run_document
from opentelemetry.exporter.prometheus_remote_write.gen.remote_pb2 import WriteRequest

from llmreplay.http_headers import parse_env_headers
from llmreplay.prometheus.config import ObserveConfig
from llmreplay.prometheus.push import push_run, write_request
from llmreplay.prometheus.run_figures import labels_of, run_figures
from llmreplay.run_format import run_info_from_json

RUN = run_document(overrides={
    "config": {"model": None, "model_map": [["prod", "staging-m"]]},
    "target": {"base_url": "http://127.0.0.1:8000", "engine": "vllm", "models": ["staging-m"]},
    "ended_unix_ns": 1_700_000_000_000_000_000,
    "summary": {
        "planned": 10,
        "sent": 9,
        "succeeded": 7,
        "errors": {"http_5xx": 2, "shed_by_client": 1},
        "error_rate": 0.2,
        "latency_ms": {
            "ttft": {"count": 7, "p50": 5.0, "p90": 9.0, "p95": None, "p99": 12.0},
            "e2e": {"count": 7, "p50": 100.0, "p90": 200.0, "p95": 250.0, "p99": 300.0},
        },
        "throughput": {"requests_per_s": 1.5, "output_tokens_per_s": None},
        "dispatch_lag_ms": {"p99": 2.5},
        "span_s": 4.0,
        "verdict": {"status": "fail", "exit_code": 1},
    },
})
INFO = run_info_from_json(RUN, "test")


def _samples(figures) -> dict:
    return {(name, tuple(sorted(extra.items()))): value for f in figures for name, extra, value in f.samples}


def test_figures_are_the_summary_in_base_units():
    samples = _samples(run_figures(INFO))
    assert samples[("llmreplay_run_requests_sent_total", ())] == 9
    assert samples[("llmreplay_run_request_errors_total", (("kind", "http_5xx"),))] == 2
    assert samples[("llmreplay_run_request_errors_total", (("kind", "shed_by_client"),))] == 1
    assert samples[("llmreplay_run_ttft_p50_seconds", ())] == 0.005
    assert ("llmreplay_run_ttft_p95_seconds", ()) not in samples  # None: left out
    assert samples[("llmreplay_run_e2e_p99_seconds", ())] == 0.3
    assert samples[("llmreplay_run_e2e_samples", ())] == 7
    assert samples[("llmreplay_run_dispatch_lag_p99_seconds", ())] == 0.0025
    assert samples[("llmreplay_run_verdict", (("status", "fail"),))] == 1
    assert samples[("llmreplay_run_end_timestamp_seconds", ())] == 1_700_000_000
    assert not any(name == "llmreplay_run_output_tokens_per_second" for name, _ in samples)
    labels = labels_of(INFO, "/runs/canary")
    assert labels == {
        "run": "canary",
        "target": "http://127.0.0.1:8000",
        "engine": "vllm",
        "model": "staging-m",
    }


def test_the_write_request_reads_back_with_sorted_labels():
    labels = labels_of(INFO, "/runs/canary")
    body = bytes(cramjam.snappy.compress_raw(write_request(labels, run_figures(INFO), 1234)))
    request = WriteRequest()
    request.ParseFromString(bytes(cramjam.snappy.decompress_raw(body)))
    series = {tuple((label.name, label.value) for label in s.labels): s.samples for s in request.timeseries}
    for names in series:
        assert list(names) == sorted(names)  # the spec asks for labels sorted by name
    key = (
        ("__name__", "llmreplay_run_request_errors_total"),
        ("engine", "vllm"),
        ("job", "llmreplay"),
        ("kind", "http_5xx"),
        ("model", "staging-m"),
        ("run", "canary"),
        ("target", "http://127.0.0.1:8000"),
    )
    assert [(s.value, s.timestamp) for s in series[key]] == [(2.0, 1234)]


def test_a_failed_push_is_one_warning_line_per_target_without_the_url_path(tmp_path, monkeypatch):
    run_dir = _run_dir(tmp_path)
    monkeypatch.setenv("LLMREPLAY_TEST_PUSH_TOKEN", "Bearer s3cr3t")
    config = ObserveConfig(
        pushgateway="http://127.0.0.1:9/secret-path",  # port 9 (discard): nothing listens there
        remote_write="http://127.0.0.1:9/api/v1/write?key=k",
        push_headers=parse_env_headers(
            ("Authorization:LLMREPLAY_TEST_PUSH_TOKEN",), "--push-header-from-env"
        ),
    )
    warnings = push_run(run_dir, config)
    assert len(warnings) == 2
    assert warnings[0].startswith("warning: --pushgateway http://127.0.0.1:9: not sent (")
    assert warnings[1].startswith("warning: --remote-write http://127.0.0.1:9: not sent (")
    assert not any(text in "".join(warnings) for text in ("secret-path", "key=k", "s3cr3t"))


def _run_dir(tmp_path):
    """A run directory as far as the push reads one: run.json (and a results.parquet beside it)."""
    run_dir = tmp_path / "canary"
    run_dir.mkdir()
    (run_dir / "results.parquet").write_bytes(b"")
    (run_dir / "run.json").write_text(json.dumps(RUN))
    return run_dir


def test_export_prometheus_refuses_without_a_target_and_fails_in_one_line_per_refusal(tmp_path):
    from click.testing import CliRunner

    from llmreplay.cli import cli

    run_dir = _run_dir(tmp_path)
    none = CliRunner().invoke(cli, ["export", "prometheus", str(run_dir)], catch_exceptions=False)
    assert none.exit_code == 2 and "--pushgateway URL and/or --remote-write URL" in none.stderr
    extra = CliRunner().invoke(
        cli, ["export", "prometheus", str(run_dir), "-o", "x.csv", "--pushgateway", "http://127.0.0.1:9"]
    )
    assert extra.exit_code == 2 and "applies to 'export mooncake and csv' only" in extra.stderr
    wrong = CliRunner().invoke(
        cli, ["export", "csv", str(run_dir), "-o", "x.csv", "--pushgateway", "http://h:1"]
    )
    assert wrong.exit_code == 2 and "--pushgateway: applies to 'export prometheus' only" in wrong.stderr
    refused = CliRunner().invoke(
        cli, ["export", "prometheus", str(run_dir), "--remote-write", "http://127.0.0.1:9/api/v1/write"]
    )
    assert refused.exit_code == 1
    assert refused.stderr.splitlines() == [
        line for line in refused.stderr.splitlines() if line.startswith("llmreplay: error: --remote-write")
    ]
    assert len(refused.stderr.splitlines()) == 1


def test_run_json_keeps_the_push_header_names_only():
    config = ObserveConfig(
        pushgateway="http://127.0.0.1:9", push_headers=(("Authorization", "Bearer s3cr3t"),)
    )
    public = config.public_dict()
    assert public["push_headers"] == ["Authorization"] and "s3cr3t" not in json.dumps(public)
    assert "s3cr3t" not in repr(config)


@pytest.mark.e2e  # promtool is a process
def test_the_pushed_exposition_lints_clean_with_promtool():
    import prometheus_client
    from prometheus_servers import promtool_check

    from llmreplay.prometheus.push import _Families

    registry = prometheus_client.CollectorRegistry(auto_describe=False)
    registry.register(_Families(run_figures(INFO)))
    lint = promtool_check(prometheus_client.generate_latest(registry).decode())
    assert lint.returncode == 0 and not lint.stdout.strip() and not lint.stderr.strip(), lint
