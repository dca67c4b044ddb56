"""The capacity report from capacity.json dicts built here: what it shows is what the dict holds."""

from __future__ import annotations

import copy
import re
import xml.etree.ElementTree as ET
from html.parser import HTMLParser

from replayer.capacity.html import (
    capacity_svg,
    factor_text,
    number_text,
    percent_text,
    render_capacity_html,
)


def cell(value: float, spread: float = 0.1) -> dict:
    return {"value_ms": value, "ci_low_ms": value * (1 - spread), "ci_high_ms": value * (1 + spread)}


def step(index: int, factor: float, achieved: float, ttft_p95: float, verdict: str = "pass", **kw) -> dict:
    offered = 3.7 * factor
    row = {
        "index": index,
        "factor": factor,
        "kind": "search",
        "run_dir": f"steps/{index:02d}-x{factor:g}",
        "elapsed_s": 31.5 + index,
        "offered": {"requests": round(offered * 60), "requests_per_s": offered, "output_tokens_per_s": offered * 211},
        "achieved": {"requests_per_s": achieved, "output_tokens_per_s": achieved * 211},
        "goodput": {"requests": 100, "good_requests": 97 - index, "share": (97 - index) / 100, "rate_per_s": achieved * 0.9},
        "latency": {
            "ttft": {"count": 100, "p50": cell(ttft_p95 / 3), "p95": cell(ttft_p95), "p99": cell(ttft_p95 * 1.4)},
            "ttfo": {"count": 0, "p50": {}, "p95": {}, "p99": {}},
            "tpot": {"count": 100, "p50": cell(21.3 + index), "p95": cell(27.9 + index), "p99": cell(33.1 + index)},
            "e2e": {"count": 100, "p50": cell(4100.0 + index), "p95": cell(5200.0 + index), "p99": cell(6300.0 + index)},
        },
        "slos": [
            {"slo": "ttft_p95<=500ms", "metric": "ttft", "percentile": 95.0, "threshold_ms": 500.0,
             "value_ms": ttft_p95, "ci_high_ms": ttft_p95 * 1.1, "verdict": "pass" if ttft_p95 * 1.1 <= 500 else "breach"},
        ],
        "errors": {"counted": 100, "engine_errors": index, "rate": index / 100, "by_kind": {}, "over_limit": False},
        "dispatch_lag_p99_ms": 1.25 + index,
        "client_bound": verdict == "client_bound",
        "client_bound_reason": None,
        "server_metrics": None,
        "verdict": verdict,
        "fail_reasons": [] if verdict == "pass" else ["ttft_p95<=500ms: CI upper bound 612.4 ms"],
    }  # fmt: skip
    row.update(kw)
    return row


def document(**changes) -> dict:
    doc = {
        "format": "llmreplay.capacity",
        "format_version": "1.0",
        "settings": {"trace_path": "samples/demo.parquet", "target_url": "http://127.0.0.1:8123", "slos": ["ttft_p95<=500ms"],
                     "by": "scale", "window_s": 300.0, "precision": 0.05, "api_key_set": True, "headers": ["X-Team"]},
        "window": {"start_s": 12.5, "end_s": 312.5, "length_s": 300.0, "requests": 1234, "whole_trace": False},
        "warmup": {"start_s": 2.5, "length_s": 10.0, "requests": 41},
        "production_peak": {"start_s": 77.0, "requests_per_s": 4.35, "output_tokens_per_s": 917.0},
        "steps": [step(0, 1.0, 3.69, 120.0), step(1, 2.0, 7.38, 260.0), step(2, 4.0, 11.2, 720.0, "fail"),
                  step(3, 3.0, 10.9, 430.0), step(4, 3.0, 10.95, 445.0, kind="sustain")],
        "knee": {"factor": 3.05, "bracket": [3.0, 4.0], "requests_per_s": 11.2, "output_tokens_per_s": 2363.2,
                 "reached": True, "noise": 0.04, "basis": "achieved_throughput", "note": "saturated steps' best"},
        "slo_limit": {"factor": 3.0, "confirmed": True, "offered_requests_per_s": 11.1,
                      "offered_output_tokens_per_s": 2342.1, "bracket": [3.0, 4.0]},
        "operating_point": {"factor": 2.1, "headroom_target": 0.7, "offered_requests_per_s": 7.77,
                            "offered_output_tokens_per_s": 1639.5},
        "headroom": {"factor": 2.55, "production_peak_requests_per_s": 4.35, "slo_limit_requests_per_s": 11.1,
                     "text": "staging holds 2.55x production's peak minute within the SLOs"},
        "bottleneck": {"kind": "compute", "reason": "the queue grew while KV usage stayed at 31%"},
        "cost": {"gpu_hour_cost": 2.5, "gpus": 8, "per_million_output_tokens": 4.27, "per_request": 0.000901,
                 "interpolated": True, "note": "interpolated between steps 1 and 3"},
        "client_bound": None,
        "stop_reason": "converged",
        "elapsed_s": 412.0,
        "verdict": {"exit_code": 0, "require_headroom": None, "passed": True, "line": "capacity: SLO limit x3"},
    }  # fmt: skip
    doc.update(changes)
    return doc


class VisibleText(HTMLParser):
    """The page's text outside <style> and <svg> (chart ticks are axis scales, not reported numbers)."""

    def __init__(self):
        super().__init__()
        self.skip, self.parts = 0, []

    def handle_starttag(self, tag, attrs):
        self.skip += tag in ("style", "svg")

    def handle_endtag(self, tag):
        self.skip -= tag in ("style", "svg")

    def handle_data(self, data):
        if not self.skip:
            self.parts.append(data)


def visible_text(html: str) -> str:
    parser = VisibleText()
    parser.feed(html)
    return " ".join(parser.parts)


def leaves(value) -> list:
    if isinstance(value, dict):
        return [n for v in value.values() for n in leaves(v)]
    if isinstance(value, list):
        return [n for v in value for n in leaves(v)]
    return [value]


NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?%?")


def test_every_number_shown_is_in_the_document():
    doc = document()
    text = visible_text(render_capacity_html(doc))
    known = set()
    for leaf in leaves(doc):
        if isinstance(leaf, str):
            known |= set(NUMBER.findall(leaf))  # numbers inside the document's own texts
        elif isinstance(leaf, int | float) and not isinstance(leaf, bool):
            known |= {str(leaf), number_text(leaf), percent_text(leaf), factor_text(leaf).removeprefix("x")}
    # the step count and the percentiles named in headers and SLO texts are words, not measurements
    known |= {str(len(doc["steps"])), "50", "95", "99", "60"}
    shown = NUMBER.findall(text)
    stray = [s for s in shown if s not in known and s.rstrip("%") not in known]
    assert not stray, f"numbers not in the document: {stray}"
    for expected in ("x3.05", "11.2", "x3", "11.1", "x2.1", "7.77", "70.0%", "2.55", "4.35", "4.27", "917"):
        assert expected in text


def test_the_three_points_headroom_bottleneck_and_cost_are_shown():
    text = visible_text(render_capacity_html(document()))
    assert "staging holds 2.55x production's peak minute within the SLOs" in text
    assert "compute: the queue grew while KV usage stayed at 31%" in text
    assert "confirmed by a sustain step" in text
    assert "Read with care" not in text


def test_curves_mark_the_points_and_draw_the_slo():
    html = render_capacity_html(document())
    charts = re.findall(r"<figure class='chart'>.*?</figure>", html)
    titles = [re.search(r"<figcaption>(.*?)</figcaption>", c).group(1) for c in charts]
    assert titles == [
        "TTFT vs offered load",
        "TPOT vs offered load",
        "E2E vs offered load",
        "Throughput and goodput vs offered load",
    ]  # TTFO has no data here: no chart
    ttft = charts[0]
    for legend in ("p50", "p95", "p99", "95% CI", "SLO p95", "knee", "limit", "op."):
        assert f">{legend}</text>" in ttft
    assert ttft.count("stroke='#9ca3af'") >= 5 + 1  # one whisker per step and percentile, drawn as segments


def test_client_bound_and_unconverged_searches_say_so():
    bound = {
        "step": 2,
        "factor": 4.0,
        "reason": "dispatch lag p99 38 ms over 5 ms",
        "advice": "add --workers 4",
    }
    steps = document()["steps"][:2] + [step(2, 4.0, 9.0, 300.0, "client_bound")]
    text = visible_text(
        render_capacity_html(
            document(steps=steps, client_bound=bound, stop_reason="client_bound", slo_limit=None, operating_point=None,
                     headroom=None, knee={**document()["knee"], "reached": False, "factor": None,
                                          "note": "not reached: every step kept up"})
        )
    )  # fmt: skip
    assert "client-bound at step 2 (x4): dispatch lag p99 38 ms over 5 ms. add --workers 4" in text
    assert "knee not reached: every step kept up" in text
    assert "no step met every SLO" in text
    assert "1 client-bound or interrupted step(s) left out of the curves" in text
    budget = visible_text(render_capacity_html(document(stop_reason="budget")))
    assert "not converged: the search ran out of --budget" in budget
    unconfirmed = visible_text(
        render_capacity_html(document(slo_limit={**document()["slo_limit"], "confirmed": False}))
    )
    assert "not confirmed by a sustain step" in unconfirmed


def test_user_strings_are_escaped_and_secrets_not_shown():
    doc = document()
    doc["settings"]["trace_path"] = "<script>alert(1)</script>.parquet"
    doc["settings"]["api_key"] = "sk-live-123"
    doc["steps"][0]["slos"][0]["slo"] = "ttft<b>"
    doc["bottleneck"]["reason"] = "a & b <i>"
    html = render_capacity_html(doc)
    assert "<script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "ttft&lt;b&gt;" in html and "a &amp; b &lt;i&gt;" in html
    assert "sk-live-123" not in html


def test_the_standalone_svg_is_one_well_formed_image():
    svg = capacity_svg(document())
    root = ET.fromstring(svg)  # well-formed XML, its own namespace
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    assert len(root.findall("{http://www.w3.org/2000/svg}svg")) == 4
    assert "<style>" in svg and "samples/demo.parquet" in svg


def test_a_document_without_steps_renders():
    doc = document(steps=[], knee=None, slo_limit=None, operating_point=None, headroom=None, cost=None)
    html = render_capacity_html(copy.deepcopy(doc))
    assert "none found" in html and "Curves" not in html
    assert capacity_svg(doc).startswith("<svg xmlns=")
