"""What the reports show of server metrics: report_series on tiny numbers, and run_server_metrics reading
a run's server_metrics.parquet through the names of run.json's engine; the engine table's names read
the scraped samples, series per role and the run's summary."""

from __future__ import annotations

import pytest
from compare_fixtures import run_document

from llmreplay.engines import BY_NAME
from llmreplay.run_format import RunInfo, run_info_from_json
from replayer.results.server_metrics import MetricsScraper, parse_prometheus
from replayer.results.server_series import (
    CHART_POINTS,
    engine_series,
    report_series,
    run_server_metrics,
    series_summary,
)

S = 1_000_000_000
VLLM = BY_NAME["vllm"].metrics


def vllm_scrape(offset_ns: int, waiting: float, queries: float, hits: float, preempted: float) -> list[tuple]:
    return [
        (offset_ns, 0, VLLM.waiting, '{model_name="m"}', waiting),
        (offset_ns, 0, VLLM.prefix_cache_queries, "", queries),
        (offset_ns, 0, VLLM.prefix_cache_hits, "", hits),
        (offset_ns, 0, VLLM.preemptions, "", preempted),
        (offset_ns, 0, "vllm:unrelated_total", "", 99.0),
    ]


def test_hit_rate_between_scrapes_and_preemptions_from_the_first():
    rows = vllm_scrape(0, 0, 100, 10, 4) + vllm_scrape(S, 5, 300, 110, 4) + vllm_scrape(2 * S, 2, 300, 110, 6)
    shown = report_series(engine_series(rows, VLLM))
    assert shown["waiting"] == [(0, 0.0), (S, 5.0), (2 * S, 2.0)]
    assert shown["prefix_cache_hit_rate"] == [(S, 0.5)]  # 100 of 200; nothing looked up after: no rate
    assert shown["preemptions"] == [(0, 0.0), (S, 0.0), (2 * S, 2.0)]
    assert "running" not in shown  # never exposed: not shown


def test_an_engine_with_a_hit_rate_gauge_shows_it_as_is():
    sglang = BY_NAME["sglang"].metrics
    rows = [(0, 0, sglang.prefix_cache_hit_rate, "", 0.25), (S, 0, sglang.prefix_cache_hit_rate, "", 0.75)]
    assert report_series(engine_series(rows, sglang))["prefix_cache_hit_rate"] == [(0, 0.25), (S, 0.75)]


def _write_run(tmp_path, rows, engine="vllm") -> RunInfo:
    scraper = MetricsScraper("http://unused/metrics", S, 0)
    scraper.rows = rows
    scraper.write(tmp_path / "server_metrics.parquet")
    return _info(engine)


def _info(engine: str) -> RunInfo:
    return run_info_from_json(run_document(overrides={"target": {"engine": engine}}), "test")


def test_a_run_read_through_its_engine_row_on_the_trace_clock(tmp_path):
    rows = vllm_scrape(0, 1, 100, 10, 0) + vllm_scrape(S, 7, 300, 110, 1) + vllm_scrape(2 * S, 3, 300, 110, 1)
    view = run_server_metrics(tmp_path, _write_run(tmp_path, rows), time_scale=2.0)
    waiting = view["series"]["waiting"]
    assert view["engine"] == "vllm" and view["summary"]["peak_waiting"] == 7.0
    assert (waiting["peak"], waiting["peak_at_s"], waiting["mean"]) == (7.0, 2.0, pytest.approx(11 / 3))
    assert waiting["points"] == [[0.0, 1.0], [2.0, 7.0], [4.0, 3.0]] and not waiting["share"]
    assert list(view["series"]) == ["waiting", "prefix_cache_hit_rate", "preemptions"]  # the reports' order
    assert view["series"]["prefix_cache_hit_rate"]["share"]


def test_a_long_run_is_thinned_to_window_peaks(tmp_path):
    rows = [(i * S, 0, VLLM.waiting, "", float(i % 7 == 3)) for i in range(3 * CHART_POINTS)]
    points = run_server_metrics(tmp_path, _write_run(tmp_path, rows))["series"]["waiting"]["points"]
    assert len(points) == CHART_POINTS and max(v for _, v in points) == 1.0


def test_nothing_to_show_without_samples_names_or_file(tmp_path):
    assert run_server_metrics(tmp_path, _info("vllm")) is None  # no file
    assert run_server_metrics(tmp_path, None) is None  # no run.json
    rows = [(0, 0, "other_metric", "", 1.0)]
    assert run_server_metrics(tmp_path, _write_run(tmp_path, rows)) is None  # none of the row's names
    assert run_server_metrics(tmp_path, _write_run(tmp_path, vllm_scrape(0, 1, 1, 1, 0), "openai")) is None


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
