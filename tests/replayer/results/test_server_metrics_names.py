"""The engine table's Prometheus names read the scraped samples: series per role and the run's summary."""

from __future__ import annotations

from llmreplay.engines import BY_NAME
from replayer.results.server_metrics import parse_prometheus
from replayer.results.server_series import engine_series, series_summary


def scrape(offset_ns: int, text: str) -> list[tuple]:
    return [(offset_ns, 0, name, labels, value) for name, labels, value in parse_prometheus(text)]


def test_engine_rows_name_the_samples_the_summary_reads():
    vllm = BY_NAME["vllm"].metrics
    rows = scrape(0, 'vllm:num_requests_waiting{engine="0"} 1\nvllm:num_requests_waiting{engine="1"} 2\n')
    rows += scrape(10, "vllm:num_requests_waiting 7\nvllm:prefix_cache_queries_total 100\n"
                   "vllm:prefix_cache_hits_total 10\nvllm:num_preemptions_total 2\n")  # fmt: skip
    rows += scrape(20, "vllm:prefix_cache_queries_total 300\nvllm:prefix_cache_hits_total 160\n"
                   "vllm:num_preemptions_total 5\nvllm:kv_cache_usage_perc 0.5\n")  # fmt: skip
    series = engine_series(rows, vllm)
    assert series["waiting"] == [(0, 3.0), (10, 7.0)]  # label sets summed per scrape
    assert series_summary(series) == {
        "peak_running": None,
        "peak_waiting": 7.0,
        "peak_kv_cache_usage": 0.5,
        "prefix_cache_hit_share": 0.75,  # 150 of 200 looked up during the run
        "preemptions": 3.0,
    }
    sglang = engine_series(
        scrape(0, "sglang:num_queue_reqs 4\nsglang:cache_hit_rate 0.25\n"), BY_NAME["sglang"].metrics
    )
    assert (
        series_summary(sglang)["peak_waiting"] == 4.0
        and series_summary(sglang)["prefix_cache_hit_share"] == 0.25
    )
