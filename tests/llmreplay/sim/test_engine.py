"""The scheduler alone, on a hand-driven clock with tiny numbers."""

from __future__ import annotations

from llmreplay.sim.engine import Engine, EngineParams, Sequence
from llmreplay.sim.prefix_cache import PrefixCache


class Recorder:
    """A sink that records (request_id, token number, time) and can refuse a token."""

    def __init__(self, refuse_at: int | None = None, outcome: str = "cut"):
        self.tokens: list[tuple[str, int, int]] = []
        self.finished: list[tuple[str, int]] = []
        self.refuse_at = refuse_at
        self.outcome = outcome

    def emit(self, seq, number, now_ns):
        if number == self.refuse_at:
            seq.outcome = self.outcome
            return False
        self.tokens.append((seq.request_id, number, now_ns))
        return True

    def finish(self, seq, now_ns):
        self.finished.append((seq.request_id, now_ns))


def params(**overrides) -> EngineParams:
    values = dict(
        max_num_seqs=2, kv_cache_tokens=1000, max_prefill_tokens_per_step=1000, prefill_ns_per_token=10,
        decode_base_ns=100, decode_per_seq_ns=5, prefix_cache_blocks=8, block_size=4,
    )  # fmt: skip
    values.update(overrides)
    return EngineParams(**values)


def seq(name: str, sink, prompt=8, target=2, hashes=()) -> Sequence:
    return Sequence(name, prompt, tuple(hashes), target, 0, sink)


def run_steps(engine: Engine, start_ns: int = 0, limit: int = 100) -> list[tuple[int, int]]:
    """Step until idle, back to back; returns (start, duration) per step."""
    now, steps = start_ns, []
    for _ in range(limit):
        plan = engine.begin_step(now)
        if plan is None:
            return steps
        steps.append((now, plan.duration_ns))
        now += plan.duration_ns
        engine.end_step(now)
    raise AssertionError("engine did not drain")


def test_step_time_is_affine_in_prefill_and_batch_size():
    sink = Recorder()
    engine = Engine(params())
    engine.submit(seq("a", sink, prompt=8, target=2))
    engine.submit(seq("b", sink, prompt=6, target=1))
    steps = run_steps(engine)
    # step 1: prefill 14 tokens * 10 + base 100 + 2 seqs * 5 = 250; step 2: only a left: 100 + 5
    assert steps == [(0, 250), (250, 105)]
    assert sink.tokens == [("a", 1, 250), ("b", 1, 250), ("a", 2, 355)]
    assert [name for name, _ in sink.finished] == ["b", "a"]
    assert engine.generation_tokens_total == 3 and engine.prompt_tokens_total == 14
    assert engine.kv_used_tokens == 0 and not engine.has_work


def test_batch_slots_limit_admission_and_free_on_finish():
    sink = Recorder()
    engine = Engine(params(max_num_seqs=2))
    for name in "abc":
        engine.submit(seq(name, sink, prompt=1, target=2))
    plan = engine.begin_step(0)
    assert plan.batch_size == 2 and engine.num_waiting == 1
    engine.end_step(plan.duration_ns)
    run_steps(engine, plan.duration_ns)
    first_token_of_c = next(t for name, n, t in sink.tokens if name == "c" and n == 1)
    last_token_of_a = next(t for name, n, t in sink.tokens if name == "a" and n == 2)
    assert first_token_of_c > last_token_of_a  # c ran only after a slot was freed


def test_kv_budget_holds_the_head_of_the_queue_fifo():
    sink = Recorder()
    engine = Engine(params(max_num_seqs=8, kv_cache_tokens=20))
    engine.submit(seq("big", sink, prompt=10, target=5))  # reserves 15
    engine.submit(seq("next", sink, prompt=4, target=4))  # 8 more would exceed 20
    engine.submit(seq("small", sink, prompt=1, target=1))  # fits, but must not overtake
    plan = engine.begin_step(0)
    assert plan.batch_size == 1 and engine.kv_used_tokens == 15 and engine.num_waiting == 2
    run_steps(engine, 0)
    assert engine.kv_used_tokens == 0
    order = [name for name, n, _ in sink.tokens if n == 1]
    assert order == ["big", "next", "small"]


def test_prefill_budget_per_step_admits_at_least_one():
    sink = Recorder()
    engine = Engine(params(max_num_seqs=8, max_prefill_tokens_per_step=10))
    engine.submit(seq("a", sink, prompt=30, target=1))
    engine.submit(seq("b", sink, prompt=4, target=1))
    plan = engine.begin_step(0)
    assert (plan.admitted, plan.prefill_tokens) == (1, 30)


def test_prefix_cache_skips_full_cached_blocks_and_keeps_the_last_one():
    sink = Recorder()
    engine = Engine(params(max_num_seqs=1))
    first = seq("first", sink, prompt=10, target=1, hashes=(11, 12))  # 2 full blocks of 4, then 2 tokens
    engine.submit(first)
    assert run_steps(engine) == [(0, 10 * 10 + 100 + 5)]
    assert first.cached_tokens == 0
    second = seq("second", sink, prompt=9, target=1, hashes=(11, 12))
    engine.submit(second)
    assert run_steps(engine, 1000) == [(1000, 1 * 10 + 100 + 5)]
    assert second.cached_tokens == 8
    exact = seq("exact", sink, prompt=8, target=1, hashes=(11, 12))  # fully cached: last block recomputed
    engine.submit(exact)
    run_steps(engine, 2000)
    assert exact.cached_tokens == 4
    other = seq("other", sink, prompt=8, target=1, hashes=(99, 12))  # chained: a different first block
    engine.submit(other)
    run_steps(engine, 3000)
    assert other.cached_tokens == 0
    assert engine.prefix_hit_tokens_total == 12 and engine.prompt_tokens_total == 35


def test_prefix_cache_is_lru_in_blocks():
    cache = PrefixCache(3)
    cache.insert([1, 2])
    cache.insert([3])
    assert cache.hit_blocks([1]) == 1  # refreshes 1, so 2 is now the oldest
    cache.insert([4])
    assert len(cache) == 3
    assert cache.hit_blocks([2]) == 0 and cache.hit_blocks([1]) == 1 and cache.hit_blocks([4]) == 1
    assert PrefixCache(0).hit_blocks([1]) == 0


def test_abort_frees_slot_and_kv_at_once():
    sink = Recorder()
    engine = Engine(params(max_num_seqs=1))
    running, waiting = seq("running", sink, target=50), seq("waiting", sink, target=1)
    engine.submit(running)
    engine.submit(waiting)
    engine.end_step(engine.begin_step(0).duration_ns)
    engine.abort(running, "cancelled_by_client", 500)
    assert running.outcome == "cancelled_by_client" and engine.num_running == 0
    assert engine.kv_used_tokens == 0
    run_steps(engine, 500)
    assert waiting.emitted_tokens == 1 and waiting.state == "done"
    queued = seq("queued", sink)
    engine.submit(queued)
    engine.abort(queued, "cancelled_by_client", 600)
    assert engine.num_waiting == 0 and engine.begin_step(700) is None
    engine.abort(queued, "shutdown", 800)  # a second abort changes nothing
    assert queued.outcome == "cancelled_by_client"


def test_a_refused_token_stops_the_sequence_without_counting_it():
    sink = Recorder(refuse_at=3, outcome="cut")
    engine = Engine(params())
    victim = seq("victim", sink, target=10)
    engine.submit(victim)
    run_steps(engine)
    assert victim.emitted_tokens == 2 and victim.outcome == "cut"
    assert engine.generation_tokens_total == 2 and engine.kv_used_tokens == 0


def test_spikes_lengthen_a_share_of_steps():
    sink = Recorder()
    engine = Engine(params(spike_rate=1.0, spike_ns=1000))
    engine.submit(seq("a", sink, prompt=0, target=1))
    plan = engine.begin_step(0)
    assert plan.spiked and plan.duration_ns == 100 + 5 + 1000


def test_first_and_last_tokens_are_stamped_when_written_given_a_clock():
    sink = Recorder()
    engine = Engine(params())
    a, b = seq("a", sink, target=1), seq("b", sink, target=3)
    engine.submit(a)
    engine.submit(b)
    ticks = iter(range(1000, 2000, 10))
    engine.end_step(engine.begin_step(0).duration_ns, lambda: next(ticks))
    assert (a.first_token_ns, a.last_token_ns, b.first_token_ns) == (1000, 1000, 1010)
    engine.end_step(engine.begin_step(500).duration_ns + 500, lambda: next(ticks))  # b's 2nd token: step time
    assert b.last_token_ns == 500 + 100 + 5
    engine.end_step(engine.begin_step(700).duration_ns + 700, lambda: next(ticks))
    assert b.last_token_ns == 1020


def test_a_big_batch_is_written_in_slices_and_an_abort_between_slices_leaves_it():
    sink = Recorder()
    engine = Engine(params(max_num_seqs=64))
    seqs = [seq(f"s{i}", sink, prompt=4, target=3) for i in range(32)]
    for s in seqs:
        engine.submit(s)
    engine.begin_step(0)
    kv_before = engine.kv_used_tokens
    clock = iter(range(0, 10_000_000, 100))  # every reading 100 ns later: a slice of 1,000 ns is ~10
    emission = engine.emit_step(1000, lambda: next(clock), slice_ns=1000)
    next(emission)  # the first slice
    written_first = len(sink.tokens)
    assert 0 < written_first < 32
    late = seqs[-1]  # not written yet: the client goes away between slices
    engine.abort(late, "cancelled_by_client", 2000)
    rest = sum(1 for _ in emission)  # the remaining slices
    assert rest >= 1
    assert [t[0] for t in sink.tokens] == [s.request_id for s in seqs[:-1]]  # once each, in order
    assert late.state == "done" and late.emitted_tokens == 0
    assert engine.num_running == 31
    assert engine.kv_used_tokens == kv_before - late.kv_tokens
