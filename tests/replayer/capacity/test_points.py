"""Knee, SLO limit, operating point, headroom, bottleneck, cost and verdict from hand-made step rows."""

import pytest

import replayer.capacity.points as points


def step(factor, offered, achieved, verdict="pass", metrics=None, tokens=40, share=1.0, se=0.5, kept_up=None):
    """A step row as measure writes it (the fields points reads), with tiny hand-checkable numbers."""
    return {
        "index": 0,
        "factor": factor,
        "kind": "search",
        "offered": {"requests": 100, "requests_per_s": offered, "output_tokens_per_s": offered * tokens},
        "achieved": {"requests_per_s": achieved, "output_tokens_per_s": achieved * tokens, "se_per_s": se},
        "goodput": {"share": share, "served_per_s": achieved * share, "served_se_per_s": se * share},
        "slos": [],
        "noise": 0.1,
        "kept_up": achieved >= offered * 0.95 if kept_up is None else kept_up,
        "verdict": verdict,
        "server_metrics": metrics,
        "client_bound": verdict == "client_bound",
    }


STEPS = [step(1, 10, 10), step(2, 20, 19.5), step(4, 40, 25, "fail"), step(3, 30, 25, "fail")]


def test_the_knee_is_where_goodput_leaves_the_offered_line():
    knee = points.knee(STEPS)
    assert knee["reached"] and knee["bracket"] == [2, 3] and knee["factor"] == pytest.approx(2.5)
    assert knee["requests_per_s"] == 25 and knee["basis"] == "achieved_throughput"


def test_knee_not_reached_when_every_step_kept_up():
    knee = points.knee(STEPS[:2])
    assert not knee["reached"] and knee["factor"] is None and knee["bracket"] == [2, None]
    assert points.knee_bracket([step(1, 10, 6, kept_up=False)]) == (None, 1)


def test_goodput_below_the_offered_rate_beyond_the_noise_is_past_the_knee():
    """With an SLO the knee is on goodput: a step that kept up but served a fifth outside the SLO is past it;
    a shortfall within 2 SEs (batch means: replayer.capacity.noise) is not."""
    steps = [step(1, 10, 10), step(1.5, 15, 15, share=0.8), step(1.25, 12.5, 12.5, share=0.97, se=0.3)]
    assert points.knee_bracket(steps) == (1.25, 1.5)
    assert points.knee(steps)["requests_per_s"] == pytest.approx(12.5 * 0.97)


def test_a_queue_that_grew_is_past_the_knee_even_when_achieved_is_within_the_noise():
    steps = [step(1, 10, 10), step(2, 20, 19.5, kept_up=False)]
    assert points.knee_bracket(steps) == (1, 2)


def test_client_bound_steps_say_nothing_of_the_server():
    assert points.knee([step(4, 40, 5, "client_bound")]) is None


def test_limit_point_headroom_and_cost():
    limit = points.slo_limit(STEPS, confirmed=2, last_pass=2, first_fail=3)
    assert limit["factor"] == 2 and limit["confirmed"] and limit["offered_requests_per_s"] == 20
    point = points.operating_point(limit, 0.7)
    assert point["factor"] == pytest.approx(1.4) and point["offered_requests_per_s"] == pytest.approx(14)
    room = points.headroom(limit, 8.0)
    assert room["factor"] == 2.5 and "2.50x production's peak minute" in room["text"]
    cost = points.cost(STEPS, point, gpu_hour_cost=3.6, gpus=2)
    rps = 10 + 0.4 * 9.5  # interpolated between x1 and x2
    assert cost["per_request"] == pytest.approx(7.2 / (rps * 3600))
    assert cost["per_million_output_tokens"] == pytest.approx(7.2 / (rps * 40 * 3600) * 1e6)
    assert points.cost(STEPS, point, None, 2) is None


def test_unconfirmed_limit_and_no_limit():
    assert points.slo_limit(STEPS, None, 2, 3)["confirmed"] is False
    assert points.slo_limit(STEPS, None, None, 1) is None


@pytest.mark.parametrize(
    ("metrics", "kind"),
    [
        (None, "unknown"),
        ({"peak_waiting": 12, "peak_kv_cache_usage": 0.2, "preemptions": 0}, "compute"),
        ({"peak_waiting": 12, "peak_kv_cache_usage": 0.97, "preemptions": 0}, "memory"),
        ({"peak_waiting": 0, "peak_kv_cache_usage": 0.3, "preemptions": 4}, "memory"),
        ({"peak_waiting": 0, "peak_kv_cache_usage": 0.3, "preemptions": 0}, "none"),
    ],
)
def test_bottleneck_reads_the_step_past_the_limit(metrics, kind):
    steps = [step(1, 10, 10), step(2, 20, 15, "fail", metrics)]
    limit = points.slo_limit(steps, 1, 1, 2)
    assert points.bottleneck(steps, limit)["kind"] == kind


def test_verdict_gate():
    limit = points.slo_limit(STEPS, 2, 2, 3)
    room = points.headroom(limit, 16.0)  # 1.25x
    assert points.verdict(limit, room, None, "converged")["exit_code"] == 0
    assert points.verdict(limit, room, 1.3, "converged")["exit_code"] == 1
    assert points.verdict(None, None, None, "min_factor")["exit_code"] == 1
    assert points.verdict(limit, room, None, "interrupted")["exit_code"] == 130
