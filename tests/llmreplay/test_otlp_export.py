"""OTLP export (llmreplay.otlp): the histograms with tiny hand-checked numbers in-process; end to end, a
replay against `llmreplay sim` (with injected 5xx) sent by `--otlp-endpoint` to a real OTLP/HTTP receiver
(tests/otlp_receiver.py, opentelemetry-proto's messages), checked against results.parquet; the failure paths.
"""

from __future__ import annotations

import json
import os
import subprocess
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from live_processes import ProcessPool, free_port, start_sim_process
from otlp_receiver import otlp_receiver
from replay_helpers import ROOT, content_record, replay_cmd, write_content_trace

from llmreplay.cli import cli
from llmreplay.errors import BadInput
from llmreplay.otlp import semconv
from llmreplay.otlp.config import parse_endpoint
from llmreplay.otlp.metric_points import Windows, histogram_points, windows_of
from llmreplay.otlp.samples import Samples, chunk_gaps

SECRET = "Bearer otlp-test-secret-7f3a"
S = 1_000_000_000


# -- in-process: tiny numbers ------------------------------------------------------------------------
def test_cumulative_points_count_each_value_in_its_upper_inclusive_bucket_from_its_window_on():
    samples = Samples(
        values=np.array([0.01, 0.015, 0.5, 0.02]),
        series=np.array([0, 0, 0, 1]),
        at_ns=np.array([100, 100 + S, 100 + 2 * S + 5, 100 + 2 * S]),
    )
    windows = Windows(start_ns=100, end_ns=100 + 2 * S + 5, step_ns=S)
    points = histogram_points(samples, [{"s": "a"}, {"s": "b"}], (0.01, 0.02, 0.04), windows)
    a = [p for p in points if p.attributes == {"s": "a"}]
    [b] = [p for p in points if p.attributes == {"s": "b"}]  # its first value is in the last window
    assert [p.count for p in a] == [1, 2, 3]
    assert [p.bucket_counts for p in a] == [[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 0, 1]]  # 0.01 <= 0.01
    assert [p.time_unix_nano for p in a] == [100 + S, 100 + 2 * S, 100 + 2 * S + 5]  # the last: the run's end
    assert {p.start_time_unix_nano for p in points} == {100}
    assert a[-1].sum == pytest.approx(0.525) and (a[-1].min, a[-1].max) == (0.01, 0.5)
    assert (b.count, b.bucket_counts, b.time_unix_nano) == (1, [0, 1, 0, 0], 100 + 2 * S + 5)


def test_points_come_every_10s_or_coarser_past_720_and_a_given_step_is_held_to_a_bound():
    hour = 3600 * S
    assert windows_of(SimpleNamespace(first_ns=0, last_ns=hour), None).step_ns == 10 * S
    three_hours = windows_of(SimpleNamespace(first_ns=0, last_ns=3 * hour), None)
    assert (three_hours.step_ns, three_hours.count) == (15 * S, 720)  # whole seconds
    assert windows_of(SimpleNamespace(first_ns=5, last_ns=5), 1.0).count == 1  # one request: one point
    with pytest.raises(BadInput, match=r"--otlp-step 0.1s: .*36000 points a series \(at most 20000\)"):
        windows_of(SimpleNamespace(first_ns=0, last_ns=hour), 0.1)


def test_chunk_gaps_stay_within_a_row():
    lists = pa.chunked_array([pa.array([[10, 15, 30], None, [7], [1, 4]], pa.list_(pa.int64()))])
    gaps, rows = chunk_gaps(lists)
    assert gaps.tolist() == [5, 15, 3] and rows.tolist() == [0, 0, 3]


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://c:4318/?api_key=1", "query or fragment"),
        ("http://c:4318/v1/metrics", "base URL"),
        ("grpc://c:4317", "http:// or https://"),
        ("http://user:pw@c:4318", "user name or password"),
    ],
)
def test_endpoints_that_would_leak_or_miss_are_refused(url, expected):
    with pytest.raises(BadInput, match=expected):
        parse_endpoint(url, "--otlp-endpoint")
    assert parse_endpoint("https://otlp.example/otlp/", "--otlp-endpoint") == "https://otlp.example/otlp"


@pytest.mark.parametrize("command", ["replay", "capacity"])
def test_a_bad_endpoint_is_one_line_and_exit_2_before_anything_runs(command, tmp_path):
    args = [
        command,
        str(tmp_path / "none.parquet"),
        "--target",
        "http://127.0.0.1:9",
        "-o",
        str(tmp_path / "out"),
    ]
    done = CliRunner().invoke(cli, [*args, "--otlp-endpoint", "http://collector:4318/?key=secret"])
    assert done.exit_code == 2
    assert done.output.splitlines() == [
        "llmreplay: error: --otlp-endpoint: the URL holds a query or fragment, which messages would show; pass "
        "credentials with --otlp-header-from-env NAME:ENV"
    ]
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["export", "otlp", "RUN"], "export otlp: --otlp-endpoint URL is required (the collector's OTLP/HTTP base URL)"),
        (["export", "csv", "RUN", "-o", "x.csv", "--otlp-endpoint", "http://c:4318"], "--otlp-endpoint: applies to 'export otlp' only"),
        (["export", "otlp", "RUN", "--otlp-endpoint", "http://c:4318", "-o", "x"], "--out: applies to 'export mooncake and csv' only"),
        (["export", "otlp", "RUN", "--otlp-endpoint", "http://c:4318", "--otlp-header-from-env", "Authorization:OTLP_UNSET_VAR"],
         "--otlp-header-from-env 'Authorization:OTLP_UNSET_VAR': the environment has no OTLP_UNSET_VAR"),
        (["export", "otlp", "RUN", "--otlp-endpoint", "http://c:4318", "--otlp-timeout", "0"], "--otlp-timeout"),
    ],
)  # fmt: skip
def test_export_otlp_flags_that_make_no_sense_are_one_line_and_exit_2(args, expected, tmp_path):
    done = CliRunner().invoke(cli, [str(tmp_path / a) if a == "RUN" else a for a in args])
    assert done.exit_code == 2 and len(done.output.splitlines()) == 1, done.output
    assert done.output.startswith(f"llmreplay: error: {expected}"), done.output


# -- end to end ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def replayed(tmp_path_factory):
    """One replay of 60 requests (a third not streamed) against a sim answering 10% with 500, sent with
    --otlp-endpoint and a secret header to a receiver; (run dir, what arrived, the replay's process)."""
    root = tmp_path_factory.mktemp("otlp")
    records = [content_record(i, i * 20.0, stream=i % 3 != 0) for i in range(60)]
    trace = write_content_trace(root / "trace.parquet", records)
    pool = ProcessPool(root)
    try:
        sim = start_sim_process(pool, "--profile", "fast", "--error-rate", "0.1", "--seed", "3")
        with otlp_receiver() as received:
            args = ("--otlp-endpoint", received.url, "--otlp-header-from-env", "Authorization:OTLP_TEST_AUTH",
                    "--otlp-step", "500ms")  # fmt: skip
            done = _replay(trace, sim, root / "run", *args)
        down = _replay(trace, sim, root / "run-down", "--otlp-endpoint", f"http://127.0.0.1:{free_port()}",
                       "--otlp-timeout", "1s")  # fmt: skip
    finally:
        pool.stop_all()
    return root / "run", received, done, down


def _replay(trace, sim, out, *args) -> subprocess.CompletedProcess:
    env = {**os.environ, "OTLP_TEST_AUTH": SECRET}
    cmd = replay_cmd(trace, sim, out, *args)
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=90, env=env)


def _attributes(items) -> dict:
    return {kv.key: getattr(kv.value, kv.value.WhichOneof("value")) for kv in items}


def _last_points(metric) -> dict[tuple, object]:
    """The last (cumulative: the whole run's) point of each series, by its sorted attributes."""
    found = {}
    for point in metric.histogram.data_points:
        key = tuple(sorted(_attributes(point.attributes).items()))
        if key not in found or point.time_unix_nano > found[key].time_unix_nano:
            found[key] = point
    return found


@pytest.mark.e2e
def test_a_replay_sends_its_metrics_with_the_genai_names_attributes_and_its_own_times(replayed):
    run, received, done, _ = replayed
    assert done.returncode in (0, 1), done.stderr
    results = pq.read_table(run / "results.parquet").to_pylist()
    info = json.loads((run / "run.json").read_text())
    ok = [r for r in results if r["error_kind"] is None]
    failed = [r for r in results if r["error_kind"] is not None]
    assert failed and {r["error_kind"] for r in failed} == {"http_5xx"}
    assert received.content_types == {"application/x-protobuf"}
    assert all(h.get("authorization") == SECRET for h in received.headers)  # the header reached it ...
    for text in (done.stdout, done.stderr, (run / "run.json").read_text()):
        assert SECRET not in text  # ... and nothing else did
    [request] = received.metrics
    [resource_metrics] = request.resource_metrics
    resource = _attributes(resource_metrics.resource.attributes)
    assert resource["service.name"] == "llmreplay" and resource["llmreplay.run.id"].startswith("run-")
    assert resource["llmreplay.engine"] == info["target"]["engine"]
    [scope] = resource_metrics.scope_metrics
    assert scope.schema_url == f"https://opentelemetry.io/schemas/{semconv.SEMCONV_VERSION}"
    assert _attributes(scope.scope.attributes) == {"llmreplay.semconv.version": semconv.SEMCONV_VERSION}
    metrics = {m.name: m for m in scope.metrics}
    assert {name: m.unit for name, m in metrics.items()} == {
        "gen_ai.client.operation.duration": "s",
        "gen_ai.client.token.usage": "{token}",
        "gen_ai.client.operation.time_to_first_chunk": "s",
        "gen_ai.client.operation.time_per_output_chunk": "s",
    }
    port = int(info["target"]["base_url"].rsplit(":", 1)[1])
    common = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "sim-model",
              "gen_ai.provider.name": info["target"]["engine"], "server.address": "127.0.0.1", "server.port": port}  # fmt: skip
    duration = _last_points(metrics["gen_ai.client.operation.duration"])
    by_error = {dict(key).get("error.type"): point for key, point in duration.items()}
    assert set(by_error) == {None, "http_5xx"}
    assert all({**common, **dict(key)} == dict(key) for key in duration)
    assert (by_error[None].count, by_error["http_5xx"].count) == (len(ok), len(failed))
    assert by_error[None].sum == pytest.approx(sum(r["e2e_ns"] for r in ok) / 1e9, abs=1e-6)
    assert list(by_error[None].explicit_bounds) == list(semconv.LATENCY_BOUNDS_S)
    tokens = {
        dict(key)["gen_ai.token.type"]: p
        for key, p in _last_points(metrics["gen_ai.client.token.usage"]).items()
    }
    assert tokens["input"].sum == sum(r["prompt_tokens"] for r in ok)
    assert tokens["output"].sum == sum(r["completion_tokens"] for r in ok)
    streamed = [r for r in ok if r["stream"]]
    [ttfc] = _last_points(metrics["gen_ai.client.operation.time_to_first_chunk"]).values()
    assert ttfc.count == len(streamed) and ttfc.sum == pytest.approx(
        sum(r["ttft_ns"] for r in streamed) / 1e9
    )
    [chunks] = _last_points(metrics["gen_ai.client.operation.time_per_output_chunk"]).values()
    assert chunks.count == sum(len(r["chunk_offsets_ns"]) - 1 for r in streamed)
    # the run's own wall-clock times, a point every 500 ms from the first send to the last answer
    first_ns = min(round(r["sent_time"].timestamp() * 1e6) for r in results) * 1000
    assert {m.histogram.aggregation_temporality for m in metrics.values()} == {2}  # CUMULATIVE
    points = metrics["gen_ai.client.operation.duration"].histogram.data_points
    assert {p.start_time_unix_nano for p in points} == {first_ns}
    assert info["started_unix_ns"] <= min(p.time_unix_nano for p in points)
    assert max(p.time_unix_nano for p in points) <= info["ended_unix_ns"]
    assert len({p.time_unix_nano for p in points}) >= 2


@pytest.mark.e2e
def test_every_sent_request_is_one_client_span_with_its_send_and_answer_times(replayed):
    run, received, _, _ = replayed
    results = {r["request_id"]: r for r in pq.read_table(run / "results.parquet").to_pylist()}
    spans = [
        s
        for request in received.traces
        for rs in request.resource_spans
        for ss in rs.scope_spans
        for s in ss.spans
    ]
    assert len(spans) == len(results) and len({s.trace_id for s in spans}) == len(spans)
    for span in spans:
        attributes = _attributes(span.attributes)
        row = results[attributes["llmreplay.request.id"]]
        assert span.name == "chat sim-model" and span.kind == span.SPAN_KIND_CLIENT
        assert span.start_time_unix_nano == round(row["sent_time"].timestamp() * 1e6) * 1000
        if row["error_kind"] is None:
            assert span.end_time_unix_nano - span.start_time_unix_nano == row["e2e_ns"]
            assert attributes["gen_ai.usage.output_tokens"] == row["completion_tokens"]
            assert attributes["gen_ai.response.finish_reasons"].values[0].string_value == row["finish_reason"]
            assert ("gen_ai.response.time_to_first_chunk" in attributes) == row["stream"]
        else:
            assert span.status.code == span.status.STATUS_CODE_ERROR
            assert (
                attributes["error.type"] == row["error_kind"]
                and attributes["http.response.status_code"] == 500
            )


@pytest.mark.e2e
def test_a_collector_that_is_down_after_a_replay_is_one_warning_and_the_same_exit_status(replayed):
    _, _, done, down = replayed
    assert down.returncode == done.returncode, down.stderr
    warnings = [line for line in down.stderr.splitlines() if "OTLP" in line]
    assert len(warnings) == 1 and "Traceback" not in down.stderr, down.stderr
    assert warnings[0].startswith("llmreplay: warning: OTLP export to http://127.0.0.1:")
    assert "could not connect (Connection refused)" in warnings[0] and "export otlp" in warnings[0]


def _export(*args: str):
    return CliRunner().invoke(cli, ["export", "otlp", *args])


@pytest.mark.e2e
def test_export_otlp_of_a_finished_run_one_signal_or_both_and_collectors_that_refuse(replayed):
    run = str(replayed[0])
    with otlp_receiver() as received:
        sent = _export(run, "--otlp-endpoint", received.url, "--no-otlp-spans")
    assert sent.exit_code == 0, sent.output
    assert sent.output.startswith("OTLP: sent run run-") and "metric points" in sent.output, sent.output
    assert len(received.metrics) == 1 and not received.traces
    everything = ("/v1/metrics", "/v1/traces")
    with otlp_receiver(refuse=dict.fromkeys(everything, 500)) as received:
        refused = _export(run, "--otlp-endpoint", received.url)
    assert refused.exit_code == 1, refused.output
    assert refused.output.strip().splitlines() == [
        f"llmreplay: error: OTLP export to {received.url} failed: metrics: HTTP 500 Internal Server Error; "
        "spans: HTTP 500 Internal Server Error (after 0 spans)"
    ]
    with otlp_receiver(refuse={"/v1/metrics": 404}) as received:  # a traces-only backend (Jaeger)
        traces_only = _export(run, "--otlp-endpoint", received.url)
    assert traces_only.exit_code == 1 and "metrics: HTTP 404 Not Found" in traces_only.output, (
        traces_only.output
    )
    assert (
        sum(len(ss.spans) for r in received.traces for rs in r.resource_spans for ss in rs.scope_spans) == 60
    )
    nothing = _export(run, "--otlp-endpoint", received.url, "--no-otlp-spans", "--no-otlp-metrics")
    assert nothing.exit_code == 2 and "nothing to send" in nothing.output, nothing.output
