"""Hostile targets before and around the clock (issue 26, 1 and 2): every answer read outside the timed
loop is bounded in size and time (llmreplay.bounded_read), and no request follows a redirect to another
origin with the key. Real servers on 127.0.0.1 (tests/hostile_target.py), each stopped at the end."""

from __future__ import annotations

import sys
import threading
import time
import urllib.request

import pytest
from hostile_target import HostileTarget, Recorder, run_watched
from replay_helpers import ROOT, content_record, replay_cmd, write_content_trace

from llmreplay.bounded_read import MAX_ANSWER_BYTES, AnswerTooLarge, CrossOriginRedirect, fetch, origin
from llmreplay.errors import BadInput
from replayer.results.server_metrics import MetricsScraper
from replayer.target import probe_metrics, probe_target

KEY = "sk-hostile-edges-0123456789abcdef"
BOUND = f"{MAX_ANSWER_BYTES >> 20} MB"
MAX_RSS_MB = 600  # a replay that reads an endless body whole passes this within a second or two


@pytest.fixture
def trace(tmp_path):
    return write_content_trace(tmp_path / "t.parquet", [content_record(i, i * 100.0) for i in range(3)])


def test_an_endless_answer_is_cut_at_the_bound_naming_the_url():
    with HostileTarget(models="endless") as target:
        url = target.url + "/v1/models"
        began = time.monotonic()
        with pytest.raises(AnswerTooLarge, match=f"{url}: the answer is larger than the {BOUND} bound"):
            fetch(urllib.request.Request(url), 10)
        assert time.monotonic() - began < 5


def test_the_probe_refuses_an_endless_model_list_even_with_engine():
    with HostileTarget(models="endless") as target:
        for engine in ("detect", "openai"):  # --engine does not skip the probe: it must not hang on it
            with pytest.raises(BadInput, match=f"/v1/models: the answer is larger than the {BOUND} bound"):
                probe_target(target.url, engine, KEY, timeout_s=10)


def test_an_endless_metrics_page_is_refused_with_the_flag_and_a_counted_failure_during_the_run():
    with HostileTarget(metrics="endless") as target:
        url = target.url + "/metrics"
        with pytest.raises(BadInput, match=f"{url}: the answer is larger than the {BOUND} bound"):
            probe_metrics(url, KEY)
        scraper = MetricsScraper(url, 1_000_000_000, time.perf_counter_ns(), KEY)
        scrape = threading.Thread(target=scraper._scrape_once, daemon=True)
        scrape.start()
        scrape.join(10)
        assert not scrape.is_alive()
        assert (scraper.scrapes, scraper.failures) == (0, 1)
        assert BOUND in scraper.last_error and url in scraper.last_error


def test_a_busy_engine_s_slow_metrics_page_is_a_scrape_not_a_failure():
    """llama-server answers /metrics after the prefill it is in: seconds, longer than the 1 s interval."""
    with HostileTarget(metrics="slow") as target:
        scraper = MetricsScraper(target.url + "/metrics", 1_000_000_000, time.perf_counter_ns(), KEY)
        scraper._scrape_once()
        assert (scraper.scrapes, scraper.failures) == (1, 0), scraper.last_error


@pytest.mark.parametrize("path", ["/v1/models", "/metrics"])
def test_a_redirect_to_another_origin_is_refused_and_the_key_stays_home(path):
    with (
        Recorder() as elsewhere,
        HostileTarget(models="redirect", metrics="redirect", redirect_to=elsewhere.url) as target,
    ):
        if path == "/v1/models":
            with pytest.raises(BadInput, match="302 redirect to another origin http://127.0.0.1:"):
                probe_target(target.url, "detect", KEY, timeout_s=5)
            assert probe_target(target.url, "openai", KEY, timeout_s=5).models == ()  # --engine: no models
        else:
            with pytest.raises(BadInput, match="302 redirect to another origin"):
                probe_metrics(target.url + path, KEY)
            scraper = MetricsScraper(target.url + path, 1_000_000_000, time.perf_counter_ns(), KEY)
            scraper._scrape_once()
            assert scraper.failures == 1 and "another origin" in scraper.last_error
        assert elsewhere.requests == 0 and elsewhere.authorizations == []


def test_a_redirect_on_the_same_origin_is_followed():
    with Recorder() as same:
        port = same.url.rsplit(":", 1)[1]
        assert origin(f"http://127.0.0.1:{port}/a") == origin(f"HTTP://127.0.0.1:{port}/b")
        assert origin("http://h/x") == origin("http://h:80/y") != origin("https://h/x")
        with HostileTarget(models="redirect", redirect_to=same.url) as target:
            with pytest.raises(CrossOriginRedirect):
                fetch(urllib.request.Request(target.url + "/v1/models"), 5)
            request = urllib.request.Request(target.url + "/v1/models", headers={"Authorization": "Bearer x"})
            target.redirect_to = target.url + "/elsewhere"  # 302 to /elsewhere/v1/models, same origin: 404
            with pytest.raises(urllib.error.HTTPError, match="404"):
                fetch(request, 5)
            assert target.requests[-1].startswith("GET /elsewhere/v1/models")


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("server", "args", "said"),
    [
        (dict(models="endless"), ("--engine", "openai", "--skip-preflight"), "/v1/models"),
        (
            dict(metrics="endless"),
            ("--engine", "openai", "--skip-preflight", "--server-metrics", "{url}/metrics"),
            "/metrics",
        ),
        (dict(chat="endless"), ("--engine", "openai"), "/v1/chat/completions"),  # the preflight's answer
    ],
)
def test_a_replay_against_an_endless_answer_before_the_clock_exits_2_in_one_line(
    trace, tmp_path, server, args, said
):
    with HostileTarget(**server) as target:
        args = tuple(a.replace("{url}", target.url) for a in args)
        cmd = replay_cmd(trace, target.url, tmp_path / "run", *args)
        done = run_watched(cmd, timeout_s=60, max_rss_mb=MAX_RSS_MB, cwd=ROOT)
    assert done.killed is None, f"{done.killed}: {done.stderr[-1000:]}"
    assert done.returncode == 2, done.stderr[-2000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and said in lines[0] and f"the {BOUND} bound" in lines[0], lines
    print(f"peak RSS {done.peak_rss_mb:.0f} MB", file=sys.stderr)
