"""The capacity model with hand-checkable numbers, then against the scheduler itself on a virtual clock."""

from __future__ import annotations

import math

import pytest

from llmreplay.errors import BadInput
from llmreplay.sim.capacity_model import (
    RequestClass,
    RequestMix,
    max_rate_for_tpot,
    saturation,
    steady_state,
    step_s_at,
)
from llmreplay.sim.config import build_config
from llmreplay.sim.engine import Engine, EngineParams, Sequence


def config(**fields):
    values = dict(
        max_num_seqs=4, decode_base_ms=10.0, decode_per_seq_ms=1.0, prefill_ns_per_token=0,
        kv_cache_tokens=1_000_000, max_prefill_tokens_per_step=16_384,
    )  # fmt: skip
    values.update(fields)
    return build_config(None, values)


def test_saturation_is_every_slot_busy():
    # 4 slots, 10 tokens each: 4 / (10 x (10 ms + 4 x 1 ms)) = 28.57 req/s, step 14 ms
    limit = saturation(config(), RequestMix.fixed(0, 10))
    assert limit.limited_by == "slots"
    assert limit.rate_per_s == pytest.approx(4 / 0.140)
    assert limit.step_s == pytest.approx(0.014)
    assert limit.batch_size == pytest.approx(4)


def test_prefill_adds_its_share_of_each_step():
    # 100 prompt tokens x 0.1 ms = 10 ms per request, 4/10 admissions per step: 4 ms a step
    limit = saturation(config(prefill_ns_per_token=100_000), RequestMix.fixed(100, 10))
    assert limit.rate_per_s == pytest.approx(4 / 0.180)
    assert limit.step_s == pytest.approx(0.018)


def test_cached_prompt_tokens_are_not_prefilled():
    cached = saturation(config(prefill_ns_per_token=100_000), RequestMix.fixed(100, 10, cached_tokens=100))
    assert cached.rate_per_s == pytest.approx(saturation(config(), RequestMix.fixed(0, 10)).rate_per_s)


def test_kv_reservations_can_bind_before_the_slots():
    # prompt + output = 110 tokens reserved: 220 tokens hold 2 requests, not 4
    limit = saturation(config(kv_cache_tokens=220), RequestMix.fixed(100, 10))
    assert limit.limited_by == "kv"
    assert limit.rate_per_s == pytest.approx(2 / 0.120)


def test_the_prefill_cap_limits_admissions_per_step():
    # one 100-token prompt per step, each answered in that step: 10 + 1 + 10 ms a request
    cfg = config(max_num_seqs=64, prefill_ns_per_token=100_000, max_prefill_tokens_per_step=100)
    limit = saturation(cfg, RequestMix.fixed(100, 1))
    assert limit.limited_by == "prefill"
    assert limit.rate_per_s == pytest.approx(1 / 0.021)


def test_steady_state_solves_littles_law():
    # s = 10 ms / (1 - 10/s x 10 x 1 ms) = 11.11 ms; b = 10 x 10 x s = 1.11
    state = steady_state(config(), RequestMix.fixed(0, 10), 10.0)
    assert state.step_s == pytest.approx(0.010 / 0.9)
    assert state.batch_size == pytest.approx(10 * 10 * 0.010 / 0.9)
    assert state.tpot_s == state.step_s
    assert state.output_tokens_per_s == pytest.approx(100.0)
    assert not state.saturated


def test_a_lone_request_still_fills_its_own_slot():
    # at 1 req/s the batch averages 0.1, but a running request always steps with itself: 11 ms
    assert step_s_at(config(), RequestMix.fixed(0, 10), 1.0) == pytest.approx(0.011)


def test_above_saturation_only_the_saturation_rate_is_served():
    state = steady_state(config(), RequestMix.fixed(0, 10), 100.0)
    assert state.saturated
    assert state.achieved_rate_per_s == pytest.approx(4 / 0.140)
    assert state.step_s == pytest.approx(0.014)


def test_largest_rate_within_a_tpot():
    mix = RequestMix.fixed(0, 10)
    # (1 - 10/12.5) / (10 x 1 ms) = 20 req/s
    assert max_rate_for_tpot(config(), mix, 0.0125) == pytest.approx(20.0)
    assert max_rate_for_tpot(config(), mix, 0.0105) == 0.0  # one request alone steps 11 ms
    assert max_rate_for_tpot(config(), mix, 0.020) == pytest.approx(4 / 0.140)  # never past saturation


def test_a_mix_uses_its_means():
    mix = RequestMix((RequestClass(0, 5), RequestClass(0, 15)))
    assert mix.output_tokens == 10
    assert saturation(config(), mix).rate_per_s == pytest.approx(4 / 0.140)
    assert RequestMix.of_lengths([10, 30], [5, 15]).uncached_tokens == 20


@pytest.mark.parametrize(
    "mix", [lambda: RequestMix(()), lambda: RequestMix.fixed(5, 0), lambda: RequestMix.fixed(5, 3, 6)]
)
def test_a_bad_mix_is_one_line(mix):
    with pytest.raises(BadInput, match="request mix"):
        mix()


def drive(cfg, prompt_tokens: int, output_tokens: int, rate_per_s: float, requests: int):
    """The engine fed fixed-rate arrivals on a virtual clock, stepping back to back while it has work
    (as stepper.py does): (completed per second over the busy middle, median TPOT in seconds)."""
    params = EngineParams(
        cfg.max_num_seqs, cfg.kv_cache_tokens, cfg.max_prefill_tokens_per_step, cfg.prefill_ns_per_token,
        cfg.decode_base_ns, cfg.decode_per_seq_ns, prefix_cache_blocks=0, block_size=cfg.block_size,
    )  # fmt: skip
    engine, sink = Engine(params), Sink()
    gap_ns = round(1e9 / rate_per_s)
    arrivals = [i * gap_ns for i in range(requests)]
    now, step_end, seqs = 0, None, []
    while arrivals or engine.has_work:
        if step_end is None or (arrivals and arrivals[0] <= step_end):
            now = arrivals.pop(0) if step_end is None else max(now, arrivals.pop(0))
            seqs.append(Sequence(f"r{len(seqs)}", prompt_tokens, (), output_tokens, now, sink))
            engine.submit(seqs[-1])
        else:
            now = step_end
            engine.end_step(now)
            step_end = None
        if step_end is None:
            plan = engine.begin_step(now)
            step_end = None if plan is None else now + plan.duration_ns
    middle = seqs[len(seqs) // 4 : 3 * len(seqs) // 4]
    done = sorted(s.last_token_ns for s in seqs)
    lo, hi = middle[0].arrival_ns, middle[-1].arrival_ns
    completed = sum(lo <= t <= hi for t in done)
    tpots = sorted((s.last_token_ns - s.first_token_ns) / (output_tokens - 1) for s in middle)
    return completed / ((hi - lo) / 1e9), tpots[len(tpots) // 2] / 1e9


class Sink:
    def emit(self, seq, number, now_ns):
        return True

    def finish(self, seq, now_ns):
        pass


@pytest.mark.parametrize("share", [0.3, 0.65, 0.9, 1.5])
def test_the_model_matches_the_scheduler(share):
    """The slow profile at shares of its saturation rate: throughput and TPOT within 5%."""
    cfg, mix = build_config("slow", {}), RequestMix.fixed(256, 64)
    rate = share * saturation(cfg, mix).rate_per_s
    throughput, tpot_s = drive(cfg, 256, 64, rate, requests=400)
    model = steady_state(cfg, mix, rate)
    assert throughput == pytest.approx(model.achieved_rate_per_s, rel=0.05)
    assert tpot_s == pytest.approx(model.tpot_s, rel=0.05)
    assert math.isfinite(model.step_s)
