"""The continuous-batching scheduler: pure state over an explicit clock (integer ns), no I/O.

A driver calls `begin_step(now)` to admit work and learn the step's duration, then
`end_step(now)` when that time has passed: every running sequence emits one token.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol

from llmreplay.sim.prefix_cache import PrefixCache


class SequenceSink(Protocol):
    """Where a sequence's tokens go (an HTTP response); the engine never touches a socket itself."""

    def emit(self, seq: Sequence, number: int, now_ns: int) -> bool:
        """Deliver token `number` (1-based); False: not delivered, the sequence stops (outcome set)."""
        ...

    def finish(self, seq: Sequence, now_ns: int) -> None:
        """The sequence left the engine: completed, aborted or stopped by `emit`."""
        ...


@dataclass(slots=True, eq=False)
class Sequence:
    """One request inside the engine (mutable engine state, not a record)."""

    request_id: str
    prompt_tokens: int
    full_block_hashes: tuple[int, ...]  # hashes of the prompt's full blocks only
    target_tokens: int  # completion tokens this sequence will emit
    arrival_ns: int
    sink: SequenceSink
    cached_tokens: int = 0
    emitted_tokens: int = 0
    admitted_ns: int = 0
    first_token_ns: int = 0  # on any channel
    last_token_ns: int = 0
    reasoning_tokens: int = 0  # the first ones of target_tokens
    first_answer_ns: int = 0  # the first token after the reasoning
    state: str = "new"  # new -> waiting -> running -> done
    outcome: str | None = None  # set when it stops early: cancelled_by_client, cut, shutdown, ...

    @property
    def kv_tokens(self) -> int:
        return self.prompt_tokens + self.target_tokens


@dataclass(frozen=True, slots=True)
class EngineParams:
    max_num_seqs: int
    kv_cache_tokens: int
    max_prefill_tokens_per_step: int
    prefill_ns_per_token: int
    decode_base_ns: int
    decode_per_seq_ns: int
    prefix_cache_blocks: int
    block_size: int
    spike_rate: float = 0.0
    spike_ns: int = 0


@dataclass(frozen=True, slots=True)
class StepPlan:
    duration_ns: int
    batch_size: int
    admitted: int
    prefill_tokens: int  # uncached prompt tokens computed in this step
    spiked: bool


class Engine:
    """Admission (FIFO, batch slots, KV budget reserved for prompt + output), prefix cache, steps."""

    def __init__(self, params: EngineParams, rng: random.Random | None = None):
        self.params = params
        self.prefix_cache = PrefixCache(params.prefix_cache_blocks)
        self._rng = rng or random.Random(0)
        self._waiting: deque[Sequence] = deque()
        self._running: list[Sequence] = []
        self._admitted_this_step: list[Sequence] = []
        self.num_waiting = 0  # excludes sequences aborted while waiting
        self.kv_used_tokens = 0
        # counters for /metrics
        self.prompt_tokens_total = 0
        self.generation_tokens_total = 0
        self.prefix_hit_tokens_total = 0  # queries = prompt_tokens_total
        self.steps_total = 0

    @property
    def num_running(self) -> int:
        return len(self._running)

    @property
    def has_work(self) -> bool:
        return bool(self._running) or self.num_waiting > 0

    def fits(self, seq: Sequence) -> bool:
        """Whether the sequence could ever run (its prompt + output fit the whole KV cache)."""
        return seq.kv_tokens <= self.params.kv_cache_tokens

    def submit(self, seq: Sequence) -> None:
        seq.state = "waiting"
        self._waiting.append(seq)
        self.num_waiting += 1

    def abort(self, seq: Sequence, outcome: str, now_ns: int) -> None:
        """Stop a sequence wherever it is (even not yet submitted); its slot and KV are freed at once."""
        if seq.state == "done":
            return
        if seq.state == "waiting":
            self.num_waiting -= 1  # stays in the deque, skipped at admission
        elif seq.state == "running":
            self._running.remove(seq)
            self.kv_used_tokens -= seq.kv_tokens
        seq.state = "done"
        seq.outcome = outcome
        seq.sink.finish(seq, now_ns)

    def abort_all(self, outcome: str, now_ns: int) -> None:
        for seq in [*self._running, *self._waiting]:
            self.abort(seq, outcome, now_ns)

    def begin_step(self, now_ns: int) -> StepPlan | None:
        """Admit what fits and price the step; None when there is nothing to run."""
        params = self.params
        admitted = self._admitted_this_step
        admitted.clear()
        prefill_tokens = 0
        waiting = self._waiting
        running = self._running
        while waiting and len(running) < params.max_num_seqs:
            seq = waiting[0]
            if seq.state != "waiting":
                waiting.popleft()
                continue
            if self.kv_used_tokens + seq.kv_tokens > params.kv_cache_tokens:
                break  # FIFO: the head waits for KV space, nobody overtakes it
            cached = self._cached_tokens(seq)
            uncached = seq.prompt_tokens - cached
            if admitted and prefill_tokens + uncached > params.max_prefill_tokens_per_step:
                break
            waiting.popleft()
            seq.cached_tokens = cached
            self.prompt_tokens_total += seq.prompt_tokens
            self.prefix_hit_tokens_total += cached
            self.num_waiting -= 1
            seq.state = "running"
            seq.admitted_ns = now_ns
            self.kv_used_tokens += seq.kv_tokens
            prefill_tokens += uncached
            running.append(seq)
            admitted.append(seq)
        if not running:
            return None
        duration_ns = (
            params.prefill_ns_per_token * prefill_tokens
            + params.decode_base_ns
            + params.decode_per_seq_ns * len(running)
        )
        spiked = params.spike_rate > 0 and self._rng.random() < params.spike_rate
        if spiked:
            duration_ns += params.spike_ns
        return StepPlan(duration_ns, len(running), len(admitted), prefill_tokens, spiked)

    def _cached_tokens(self, seq: Sequence) -> int:
        hits = self.prefix_cache.hit_blocks(seq.full_block_hashes)
        if hits and hits * self.params.block_size >= seq.prompt_tokens:
            hits -= 1  # a fully cached prompt still computes its last block (as vLLM does)
        return hits * self.params.block_size

    def end_step(self, now_ns: int, clock: Callable[[], int] | None = None) -> None:
        """Every running sequence emits one token; finished or stopped ones leave the batch."""
        for _ in self.emit_step(now_ns, clock):
            pass

    def emit_step(
        self, now_ns: int, clock: Callable[[], int] | None = None, slice_ns: int | None = None
    ) -> Iterator[None]:
        """`end_step` in slices: yields after about `slice_ns` of writing (with `clock`), so the
        caller can let its event loop read new requests between slices instead of after the whole
        batch. The batch's state is settled after the last slice; sequences aborted meanwhile leave
        it as they would have between steps.

        With `clock`, first and last tokens are stamped just before they are written: in a big batch
        the last write of a step comes measurably later than its start, and a stamp taken after the
        write could be later than the client's receipt when this process is preempted in between.
        """
        for seq in self._admitted_this_step:
            if seq.state == "running":
                self.prefix_cache.insert(seq.full_block_hashes)
        self._admitted_this_step.clear()
        self.steps_total += 1
        still_running: list[Sequence] = []
        emitted = 0
        slice_end_ns = clock() + slice_ns if clock is not None and slice_ns is not None else None
        for i, seq in enumerate(list(self._running)):
            if slice_end_ns is not None and i % 8 == 7 and clock() >= slice_end_ns:
                yield
                slice_end_ns = clock() + slice_ns
            if seq.state != "running":
                continue  # aborted between slices: abort() freed it already
            number = seq.emitted_tokens + 1
            answer_starts = number == seq.reasoning_tokens + 1
            stamp_ns = (
                clock()
                if clock is not None and (number == 1 or answer_starts or number == seq.target_tokens)
                else now_ns
            )
            if seq.sink.emit(seq, number, now_ns):
                seq.emitted_tokens = number
                emitted += 1
                if number == 1:
                    seq.first_token_ns = stamp_ns
                if answer_starts:
                    seq.first_answer_ns = stamp_ns
                seq.last_token_ns = stamp_ns
                if number < seq.target_tokens:
                    still_running.append(seq)
                    continue
            seq.state = "done"
            self.kv_used_tokens -= seq.kv_tokens
            seq.sink.finish(seq, now_ns)
        self._running = [seq for seq in still_running if seq.state == "running"]
        self.generation_tokens_total += emitted
