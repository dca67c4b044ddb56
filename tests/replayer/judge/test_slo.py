"""SLO syntax, percentile verdicts and goodput on hand-checkable numbers."""

from __future__ import annotations

import numpy as np
import pytest

from llmreplay.errors import BadInput
from replayer.judge.slo import Slo, goodput, meets_slos, parse_duration_ns, parse_slo, slo_verdict


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("ttft_p95<=500ms", Slo("ttft", 95.0, 500_000_000, "ttft_p95<=500ms")),
        ("tpot_p99<=50ms", Slo("tpot", 99.0, 50_000_000, "tpot_p99<=50ms")),
        ("e2e_p99<=20s", Slo("e2e", 99.0, 20_000_000_000, "e2e_p99<=20s")),
        (" itl_p99.9 <= 1.5ms ", Slo("itl", 99.9, 1_500_000, "itl_p99.9 <= 1.5ms")),
    ],
)
def test_parse_slo(text, expected):
    assert parse_slo(text) == expected


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("ttft<=500ms", "expected METRIC_pPCT<=DURATION"),
        ("ttft_p95>=500ms", "expected METRIC_pPCT<=DURATION"),
        ("latency_p95<=500ms", "unknown metric 'latency'"),
        ("ttft_p100<=500ms", "between 0 and 100"),
        ("ttft_p95<=500", "not a duration"),
        ("ttft_p95<=fast", "not a duration"),
    ],
)
def test_bad_slo_is_one_clear_line(text, fragment):
    with pytest.raises(BadInput) as info:
        parse_slo(text)
    message = str(info.value)
    assert fragment in message and "\n" not in message and message.startswith("--slo")


def test_durations():
    assert parse_duration_ns("3ms", "x") == 3_000_000
    assert parse_duration_ns("250us", "x") == 250_000
    assert parse_duration_ns("-2ms", "x", allow_negative=True) == -2_000_000
    with pytest.raises(BadInput, match="must not be negative"):
        parse_duration_ns("-2ms", "--offset")


def test_slo_verdict_uses_the_candidate_percentile():
    values = np.array([100.0, 200.0, 300.0, 400.0, np.nan]) * 1e6  # NaN: a failed request
    slo = parse_slo("ttft_p50<=250ms")
    assert slo_verdict(slo, values, None)["verdict"] == "pass"  # p50 = 250 ms
    assert slo_verdict(parse_slo("ttft_p50<=249ms"), values, values)["verdict"] == "breach"
    assert slo_verdict(slo, np.array([np.nan]), None)["verdict"] == "no_data"


def test_goodput_counts_requests_meeting_every_slo():
    success = np.array([True, True, True, False])
    per_request = {
        "ttft": np.array([100, 600, 100, np.nan]) * 1e6,
        "tpot": np.array([10, 10, np.nan, np.nan]) * 1e6,  # request 2 had one output token: no TPOT
        "e2e": np.array([1, 1, 1, np.nan]) * 1e9,
    }
    slos = [parse_slo("ttft_p95<=500ms"), parse_slo("tpot_p99<=50ms"), parse_slo("itl_p99<=1ms")]
    meets = meets_slos(success, per_request, slos)
    assert meets.tolist() == [True, False, True, False]
    result = goodput(meets, np.ones(4, dtype=bool), duration_s=2.0)
    assert result == {"requests": 4, "good_requests": 2, "share": 0.5, "rate_per_s": 1.0}
