"""The event loop of one worker: open-loop dispatch at absolute deadlines, session chains, shedding,
read-timeout watchdog, bounded shutdown. Network I/O and timestamping only (bodies are encoded before
the clock starts); no run outlives duration + grace (docs/design/replay-loop.md)."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from replayer.loop.answer_echo import ECHO_DIALECT, answer_text, echoes, with_answers
from replayer.loop.chain import CHAINED_DIALECT, is_chained, with_previous_response
from replayer.loop.client import NEVER_NS, ClientExchange, Outcome, ReadClock
from replayer.loop.clock import Clock, SystemClock
from replayer.loop.http_pool import ConnectionPool, Endpoint
from replayer.plan.sessions import session_due_ns

if TYPE_CHECKING:
    from replayer.plan.arrays import PlanArrays, PlannedRequest

USER_AGENT = "llmreplay"
WATCHDOG_MAX_INTERVAL_NS = 1_000_000_000
WATCHDOG_MIN_INTERVAL_NS = 10_000_000


@dataclass(frozen=True, slots=True)
class LoopSettings:
    """What the loop needs from ReplayConfig, resolved for one worker."""

    endpoint: Endpoint
    start_ns: int  # the clock's now_ns() (perf_counter_ns) at the run's offset 0, shared by all workers
    max_inflight: int
    duration_ns: int | None
    grace_ns: int
    connect_timeout_ns: int
    read_timeout_ns: int
    early_wake_ns: int
    warm_connections: int


class Sent:
    """One finished request as the loop saw it; converted to a result row after the run."""

    __slots__ = ("plan", "due_ns", "outcome", "shed")

    def __init__(self, plan: PlannedRequest, due_ns: int, outcome: Outcome | None, shed: bool = False):
        self.plan = plan
        self.due_ns = due_ns  # absolute clock ns when it was due (schedule + session wait)
        self.outcome = outcome  # None when shed
        self.shed = shed


class Counters:
    """Live figures for the progress display (copied to shared memory by the worker)."""

    __slots__ = ("sent", "done", "errors", "shed", "inflight", "recent_lags_ns")

    def __init__(self):
        self.sent = self.done = self.errors = self.shed = self.inflight = 0
        self.recent_lags_ns: list[int] = []


class _Call:
    """A request between dispatch and its result: the exchange once written, for stop and timeouts."""

    __slots__ = ("outcome", "exchange", "task", "answers")

    def __init__(self, outcome: Outcome):
        self.outcome = outcome
        self.exchange: ClientExchange | None = None
        self.task: asyncio.Task | None = None
        self.answers: list | None = None  # the session's earlier answers this turn was given


class Runner:
    """One worker's loop over its plans; `clock` is its time (a SystemClock unless a test passes a fake)."""

    def __init__(
        self,
        plans: PlanArrays,
        requests: Sequence[bytes],
        streams: Sequence[bool],
        settings: LoopSettings,
        results=None,
        clock: Clock | None = None,
        dialects: Sequence[str] | None = None,
    ):
        self.plans = plans
        self.dialects = dialects  # by plan index, the answer's grammar (wire.dialects); None: chat
        # a chained Responses turn's previous answer id, by plan index, until the turn is sent
        self._previous_ids: dict[int, str | None] = {}
        # the texts staging answered the session's earlier turns (latest first), by the plan index of the
        # turn that may echo them, until it is sent (replayer.loop.answer_echo)
        self._previous_answers: dict[int, list] = {}
        self.requests = requests  # encoded HTTP request per plan index (may read them as the run goes)
        self.streams = streams
        self.s = settings
        # finished requests: anything with append(Sent), e.g. a replayer.loop.result_spool.ResultSpool
        self.results = [] if results is None else results
        self.clock = clock  # None: a SystemClock on the running loop
        self._now = None if clock is None else clock.now_ns  # bound once: called per request
        self.counters = Counters()
        self.stale_resends = 0  # requests sent again after a kept-alive connection closed unanswered
        self.stopping = False
        self.stop_reason = "completed"  # | "duration" (it cut the schedule) | "interrupted" | "orphaned"
        self.cut_after_grace = 0  # requests still open when the grace period ran out (cut: "shutdown")
        self._calls: set[_Call] = set()
        self._waiting: dict[asyncio.Task, tuple[PlannedRequest, int]] = {}  # session turns: (plan, due)
        self._duration_stop: asyncio.TimerHandle | None = None
        self._dispatcher: asyncio.Future | None = None
        self._idle = asyncio.Event()
        self._pool: ConnectionPool | None = None
        self._reads: ReadClock | None = None
        self._heads = plans.heads()  # sent on schedule; the rest follow
        self._head_i = 0

    async def run(self) -> list[Sent]:
        loop = asyncio.get_running_loop()
        loop.set_task_factory(asyncio.eager_task_factory)  # a dispatched request is written at once
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self.stop, "interrupted")
        s = self.s
        if self.clock is None:
            self.clock = SystemClock(loop)
        self._now = self.clock.now_ns
        self._pool = ConnectionPool(s.endpoint, s.connect_timeout_ns / 1e9, s.warm_connections)
        self._reads = ReadClock(loop, self._now)
        self._reads.on_due = self._send_due_heads
        watchdog = loop.create_task(self._watch_reads())
        if s.duration_ns is not None:  # stop sending then; in-flight requests get the grace period
            self._end_of_duration()
        try:
            await self._warm()
            self._dispatcher = asyncio.ensure_future(self._dispatch_heads())
            try:
                await self._dispatcher
            except asyncio.CancelledError:
                if not self.stopping:
                    raise
            await self._drain()
        finally:
            if self._duration_stop is not None:
                self._duration_stop.cancel()
            watchdog.cancel()
            self._pool.close()
            self.clock.close()
        return self.results

    def stop(self, reason: str = "interrupted") -> None:
        """Stop sending; in-flight requests get the grace period (SIGINT/SIGTERM and the end of
        --duration land here)."""
        if self.stopping:
            return
        self.stopping = True
        self.stop_reason = reason
        if self._reads is not None:
            self._reads.next_due_ns = NEVER_NS
        if self._dispatcher is not None:
            self._dispatcher.cancel()
        for task in list(self._waiting):
            task.cancel()
        if self._duration_stop is not None:
            self._duration_stop.cancel()
        self._idle.set()

    def _end_of_duration(self) -> None:
        """At start + duration (one loop timer for the run): send what fell due before it, even when
        the loop is late to get here, then stop; re-armed when the loop's timer fires early."""
        end_ns = self.s.start_ns + self.s.duration_ns
        left_ns = end_ns - self._now()
        if left_ns > 0:
            self._duration_stop = self.clock.call_later(left_ns, self._end_of_duration)
            return
        self._duration_stop = None
        if self.stopping:
            return
        self._send_due_heads()
        for task, (plan, due_ns) in list(self._waiting.items()):
            if due_ns < end_ns and not self.stopping:
                task.cancel()  # its wait is over: sent here, not after the stop
                self._dispatch(plan, due_ns)
        self.stop("duration")

    def abandon(self) -> None:
        """The coordinator is gone: stop at once, no grace. Every connection, in flight or idle, is
        aborted (not flushed), so not one more byte goes to the target; the caller exits next."""
        self.stopping = True
        self.stop_reason = "orphaned"
        if self._reads is not None:
            self._reads.next_due_ns = NEVER_NS
        for call in list(self._calls):
            if call.exchange is not None:
                call.exchange.abort()
        if self._pool is not None:
            self._pool.abort()

    async def _warm(self) -> None:
        """Open keep-alive connections before the clock starts, so early sends skip the TCP handshake."""
        budget_s = (self.s.start_ns - self._now()) / 1e9 - 0.05
        if self.s.warm_connections <= 0 or budget_s <= 0:
            return
        try:
            await asyncio.wait_for(self._pool.warm(self.s.warm_connections), budget_s)
        except TimeoutError:
            pass

    async def _sleep_until(self, due_ns: int, head: bool = False) -> None:
        """A timer until shortly before the deadline, then yield to the loop until it (yielding, not
        spinning, keeps reads timestamped while we wait). The early margin is capped by how late the
        clock's waits can be (a timerfd's ~0.25 ms: a quarter of the CPU spent yielding). For a head,
        returns early once a read has dispatched it (the read clock's deadline moved on)."""
        clock = self._now
        early = min(self.s.early_wake_ns, self.clock.wake_lateness_ns)
        if due_ns - clock() > early:
            await self.clock.wait_until(due_ns - early)
        watched = self._reads
        while clock() < due_ns and not (head and watched.next_due_ns != due_ns):
            await asyncio.sleep(0)

    def _past_duration(self, due_ns: int) -> bool:
        return self.s.duration_ns is not None and due_ns - self.s.start_ns >= self.s.duration_ns

    async def _dispatch_heads(self) -> None:
        """Send every session head at its deadline; reads may send one first (ReadClock.on_due)."""
        while not self.stopping:
            self._send_due_heads()
            due = self._reads.next_due_ns
            if due == NEVER_NS:
                return
            await self._sleep_until(due, head=True)

    def _send_due_heads(self) -> None:
        """Dispatch every head whose deadline has passed; publish the next deadline to the clock."""
        clock = self._reads
        clock.next_due_ns = NEVER_NS  # no re-entry from a read while we dispatch
        heads, i, start, now = self._heads, self._head_i, self.s.start_ns, self._now
        while i < len(heads) and not self.stopping:
            due = start + heads[i].scheduled_offset_ns
            if self._past_duration(due):
                i = len(heads)
                self.stop_reason = "duration"  # it cut the schedule
                break
            if due > now():
                break
            i += 1
            self._dispatch(heads[i - 1], due)
        self._head_i = i
        if i < len(heads) and not self.stopping:
            clock.next_due_ns = start + heads[i].scheduled_offset_ns

    def _dispatch(self, plan: PlannedRequest, due_ns: int) -> None:
        c = self.counters
        if c.inflight >= self.s.max_inflight:
            c.shed += 1
            self.results.append(Sent(plan, due_ns, None, shed=True))
            self._follow(plan, self._now())
            return
        c.inflight += 1
        call = _Call(Outcome(self._now()))
        self._calls.add(call)
        task = asyncio.get_running_loop().create_task(self._execute(plan, due_ns, call))
        if not task.done():
            call.task = task

    async def _execute(self, plan: PlannedRequest, due_ns: int, call: _Call) -> None:
        outcome = call.outcome
        pool = self._pool
        canceller = None
        dialect = "chat" if self.dialects is None else self.dialects[plan.index]
        try:
            request = self.requests[plan.index]
            if dialect == CHAINED_DIALECT and is_chained(request):
                request = self._chained(plan, request, outcome)
                if request is None:
                    return
            if plan.follows_previous:
                call.answers = self._previous_answers.pop(plan.index, None)
                if call.answers and echoes(request):
                    request = with_answers(request, call.answers)
            keep = plan.next_index is not None and dialect == ECHO_DIALECT
            conn = pool.take_idle()
            if conn is None:
                conn = await pool.open()
            if plan.cancel_after_ns is not None:
                canceller = self.clock.call_later(plan.cancel_after_ns, _stop_call, call, "cancelled")
            exchange = call.exchange = ClientExchange(
                outcome, self.streams[plan.index], plan.cancel_after_tokens, self._reads, dialect, keep
            )
            exchange.send(pool, conn, request)
            self.counters.sent += 1
            pool.top_up()
            await exchange.done
            if exchange.stale and outcome.stop_reason is None:  # once, on a fresh connection
                outcome.resend()
                self.stale_resends += 1
                conn = await pool.open()
                exchange = call.exchange = ClientExchange(
                    outcome, self.streams[plan.index], plan.cancel_after_tokens, self._reads, dialect, keep
                )
                exchange.send(pool, conn, request)
                await exchange.done
        except asyncio.CancelledError:
            if outcome.stop_reason is None:
                raise
            outcome.e2e_ns = self._now() - outcome.sent_ns
            outcome.fail(outcome.stop_reason)
        except (OSError, TimeoutError) as exc:  # could not connect
            outcome.e2e_ns = self._now() - outcome.sent_ns
            outcome.fail("connect_error", f"{type(exc).__name__}: {exc}"[:200])
        finally:
            if canceller is not None:
                canceller.cancel()
            self._record(plan, due_ns, call)

    def _chained(self, plan: PlannedRequest, request: bytes, outcome: Outcome) -> bytes | None:
        """The request naming staging's id for the previous turn; None (not sent: chain_broken) when
        that turn failed, gave no id, or there is none."""
        previous = self._previous_ids.pop(plan.index, None)
        if previous is None:
            outcome.e2e_ns = 0
            outcome.fail("chain_broken", "the previous turn of the chain failed or gave no response id")
            return None
        return with_previous_response(request, previous)

    def _record(self, plan: PlannedRequest, due_ns: int, call: _Call) -> None:
        self._calls.discard(call)
        outcome = call.outcome
        c = self.counters
        c.inflight -= 1
        c.done += 1
        lags = c.recent_lags_ns
        lags.append(outcome.sent_ns - due_ns)
        if len(lags) > 4096:
            del lags[:2048]
        if outcome.error_kind is not None:
            c.errors += 1
        self.results.append(Sent(plan, due_ns, outcome))
        # the turn ended when its last bytes were read, not when this task got to run
        ended_ns = self._now() if outcome.e2e_ns is None else outcome.sent_ns + outcome.e2e_ns
        failed = outcome.error_kind is not None
        answer = None if failed or call.exchange is None else call.exchange.answer
        self._follow(plan, ended_ns, None if failed else outcome.response_id, answer, call.answers)
        if not self._calls and not self._waiting:
            self._idle.set()

    def _follow(
        self, plan: PlannedRequest, ended_ns: int, response_id: str | None = None, answer=None, answers=None
    ) -> None:
        """Send the session's next turn after this one's answer plus the recorded think time; a
        Responses turn keeps this turn's response id (None: failed) for a chained body, a chat turn
        its answer's text for a body that echoes it."""
        if plan.next_index is None or self.stopping:
            return
        nxt = self.plans[plan.next_index]
        if self.dialects is not None and self.dialects[nxt.index] == CHAINED_DIALECT:
            self._previous_ids[nxt.index] = response_id
        scheduled = self.s.start_ns + nxt.scheduled_offset_ns
        if self._past_duration(scheduled):
            self.stop_reason = "duration"
            return
        if answer is not None or answers:
            text = None if answer is None else answer_text(*answer)
            self._previous_answers[nxt.index] = [text, *(answers or ())]
        due = session_due_ns(scheduled, ended_ns, nxt.think_time_ns)
        if due <= self._now():
            self._dispatch(nxt, due)
            return
        waiter = asyncio.get_running_loop().create_task(self._dispatch_later(nxt, due))
        if not waiter.done():
            self._waiting[waiter] = (nxt, due)
            waiter.add_done_callback(self._waiting_done)

    def _waiting_done(self, task: asyncio.Task) -> None:
        self._waiting.pop(task, None)
        if not self._calls and not self._waiting:
            self._idle.set()

    async def _dispatch_later(self, plan: PlannedRequest, due_ns: int) -> None:
        await self._sleep_until(due_ns)
        if not self.stopping:
            self._dispatch(plan, due_ns)

    async def _watch_reads(self) -> None:
        """Stop requests silent for longer than the read timeout (one check for all, not a timer each)."""
        timeout_ns = self.s.read_timeout_ns
        interval_ns = min(WATCHDOG_MAX_INTERVAL_NS, max(WATCHDOG_MIN_INTERVAL_NS, timeout_ns // 10))
        clock = self.clock
        while True:
            await clock.wait_until(clock.now_ns() + interval_ns)
            now = clock.now_ns()
            for call in list(self._calls):
                exchange = call.exchange
                if exchange is not None and now - exchange.last_ns > timeout_ns:
                    exchange.stop("timeout", f"no data for {timeout_ns / 1e9:g} s")

    async def _drain(self) -> None:
        """Wait for the last requests and session turns; after a stop, only for the grace period."""
        while (self._calls or self._waiting) and not self.stopping:
            self._idle.clear()
            if self._calls or self._waiting:
                await self._idle.wait()
        if not self._calls:
            return
        now = self._now
        deadline = now() + self.s.grace_ns
        while self._calls and now() < deadline:
            self._idle.clear()
            timeout = self.clock.call_later(deadline - now(), self._idle.set)
            await self._idle.wait()
            timeout.cancel()
        pending = [call.task for call in self._calls if call.task is not None]
        self.cut_after_grace = len(self._calls)
        for call in list(self._calls):
            _stop_call(call, "shutdown")
        if pending:
            await asyncio.wait(pending, timeout=5)


def _stop_call(call: _Call, reason: str) -> None:
    """Stop one request: through its exchange once written, else by cancelling its connect."""
    if call.exchange is not None:
        call.exchange.stop(reason)
    elif call.task is not None and not call.task.done():
        call.outcome.stop_reason = reason
        call.task.cancel()
