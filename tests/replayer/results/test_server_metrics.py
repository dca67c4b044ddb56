"""Prometheus samples: the parser on hand-written exposition text, the scraper against a sim in this process."""

from __future__ import annotations

import time

import pyarrow.parquet as pq

from replayer.results.server_metrics import SERVER_METRICS_SCHEMA, MetricsScraper, parse_prometheus

EXPOSITION = """\
# HELP vllm:num_requests_running Requests running.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="m",engine="0"} 3
process_cpu_seconds_total 1.5e1
vllm:e2e_request_latency_seconds_bucket{le="0.5"} 4
vllm:e2e_request_latency_seconds_sum{model_name="m"} 2.25 1700000000000
broken_line
not_a_number{a="b"} NaNx

"""


def test_samples_with_and_without_labels_histogram_buckets_and_junk_left_out():
    assert parse_prometheus(EXPOSITION) == [
        ("vllm:num_requests_running", '{model_name="m",engine="0"}', 3.0),
        ("process_cpu_seconds_total", "", 15.0),
        ("vllm:e2e_request_latency_seconds_sum", '{model_name="m"}', 2.25),  # the timestamp ignored
    ]


def test_scrapes_are_counted_failures_too_and_written_in_the_schema(start_sim_in_process, tmp_path):
    sim = start_sim_in_process()
    scraper = MetricsScraper(f"{sim.url}/metrics", interval_ns=20_000_000, start_ns=time.perf_counter_ns())
    scraper.start()
    time.sleep(0.15)
    scraper.stop()
    assert scraper.scrapes >= 3 and scraper.failures == 0
    gone = MetricsScraper(f"{sim.url}/no-such-page", interval_ns=20_000_000, start_ns=time.perf_counter_ns())
    gone.start()
    time.sleep(0.05)
    gone.stop()
    assert gone.scrapes == 0 and gone.failures >= 1 and "404" in gone.last_error

    scraper.write(tmp_path / "server_metrics.parquet")
    table = pq.read_table(tmp_path / "server_metrics.parquet")
    assert table.schema.equals(SERVER_METRICS_SCHEMA)
    running = [row for row in table.to_pylist() if row["metric"] == "vllm:num_requests_running"]
    assert len(running) == scraper.scrapes and all(row["value"] == 0 for row in running)
    assert [row["offset_ns"] for row in running] == sorted(row["offset_ns"] for row in running)
