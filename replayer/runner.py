"""The event loop of one worker: open-loop dispatch at absolute deadlines, session chains, shedding,
bounded shutdown. The loop does network I/O and timestamping only; bodies are built beforehand.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass

import aiohttp

from replayer.client import Outcome, send, send_time_tracer
from replayer.request_builder import BuiltRequest
from replayer.schedule import PlannedRequest
from replayer.sessions import session_due_ns

USER_AGENT = "llmreplay"
LEAD_SHARE = 0.75
LEAD_SMOOTHING = 0.05
MAX_LEAD_NS = 500_000


@dataclass(frozen=True, slots=True)
class LoopSettings:
    """What the loop needs from ReplayConfig, resolved for one worker."""

    base_url: str
    start_ns: int  # perf_counter_ns() of the run's offset 0, shared by all workers
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
        self.due_ns = due_ns  # absolute perf_counter_ns when it was due (schedule + session wait)
        self.outcome = outcome  # None when shed
        self.shed = shed


class Counters:
    """Live figures for the progress display (copied to shared memory by the worker)."""

    __slots__ = ("sent", "done", "errors", "shed", "inflight", "recent_lags_ns")

    def __init__(self):
        self.sent = self.done = self.errors = self.shed = self.inflight = 0
        self.recent_lags_ns: list[int] = []


class Runner:
    def __init__(
        self,
        plans: Sequence[PlannedRequest],
        built: Sequence[BuiltRequest],
        headers: Sequence[dict[str, str]],
        settings: LoopSettings,
    ):
        self.plans = plans
        self.built = built
        self.headers = headers
        self.s = settings
        self.results: list[Sent] = []
        self.counters = Counters()
        self.stopping = False
        self.stop_reason = "completed"
        self._inflight: dict[asyncio.Task, Outcome] = {}
        self._waiting: set[asyncio.Task] = set()
        self._heads: asyncio.Future | None = None
        self._idle = asyncio.Event()
        self._session: aiohttp.ClientSession | None = None
        self._lead_ns = 0  # start the call this early: aiohttp's own work before the bytes go out

    async def run(self) -> list[Sent]:
        loop = asyncio.get_running_loop()
        loop.set_task_factory(asyncio.eager_task_factory)  # a dispatched request is sent at once
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self.stop, "interrupted")
        connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=None, keepalive_timeout=600)
        timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=self.s.connect_timeout_ns / 1e9, sock_read=self.s.read_timeout_ns / 1e9
        )
        async with aiohttp.ClientSession(
            connector=connector,
            timeout=timeout,
            auto_decompress=False,
            cookie_jar=aiohttp.DummyCookieJar(),
            skip_auto_headers=("User-Agent",),
            trace_configs=[send_time_tracer()],
        ) as session:
            self._session = session
            await self._warm(session)
            self._heads = asyncio.ensure_future(self._dispatch_heads())
            try:
                await self._heads
            except asyncio.CancelledError:
                if not self.stopping:
                    raise
            await self._drain()
        return self.results

    def stop(self, reason: str = "interrupted") -> None:
        """Stop sending; in-flight requests get the grace period (SIGINT/SIGTERM land here)."""
        if self.stopping:
            return
        self.stopping = True
        self.stop_reason = reason
        if self._heads is not None:
            self._heads.cancel()
        for task in list(self._waiting):
            task.cancel()
        self._idle.set()

    async def _warm(self, session: aiohttp.ClientSession) -> None:
        """Open keep-alive connections before the clock starts, so early sends skip the TCP handshake."""
        budget_s = (self.s.start_ns - time.perf_counter_ns()) / 1e9 - 0.05
        if self.s.warm_connections <= 0 or budget_s <= 0:
            return

        async def touch():
            try:
                async with session.get(self.s.base_url + "/v1/models") as resp:
                    await resp.read()
            except (aiohttp.ClientError, TimeoutError):
                pass

        try:
            await asyncio.wait_for(
                asyncio.gather(*(touch() for _ in range(self.s.warm_connections))), budget_s
            )
        except TimeoutError:
            pass

    async def _sleep_until(self, due_ns: int) -> None:
        """Timer until shortly before the deadline, then spin: loop timers are only ms-precise.

        The target is the moment the bytes go out, so the call starts `_lead_ns` early."""
        due_ns -= self._lead_ns
        remaining = due_ns - time.perf_counter_ns()
        if remaining > self.s.early_wake_ns:
            await asyncio.sleep((remaining - self.s.early_wake_ns) / 1e9)
        clock = time.perf_counter_ns
        while clock() < due_ns:
            pass

    def _past_duration(self, due_ns: int) -> bool:
        return self.s.duration_ns is not None and due_ns - self.s.start_ns >= self.s.duration_ns

    async def _dispatch_heads(self) -> None:
        if self.stopping:
            return
        start = self.s.start_ns
        for plan in self.plans:
            if plan.follows_previous:
                continue
            due = start + plan.scheduled_offset_ns
            if self._past_duration(due):
                break
            if due > time.perf_counter_ns():
                await self._sleep_until(due)
            self._dispatch(plan, due)

    def _dispatch(self, plan: PlannedRequest, due_ns: int) -> None:
        c = self.counters
        if c.inflight >= self.s.max_inflight:
            c.shed += 1
            self.results.append(Sent(plan, due_ns, None, shed=True))
            self._follow(plan, time.perf_counter_ns())
            return
        c.inflight += 1
        outcome = Outcome(0)
        task = asyncio.get_running_loop().create_task(self._execute(plan, due_ns, outcome))
        if not task.done():
            self._inflight[task] = outcome
            task.add_done_callback(self._inflight_done)

    def _inflight_done(self, task: asyncio.Task) -> None:
        self._inflight.pop(task, None)
        if not self._inflight and not self._waiting:
            self._idle.set()

    async def _execute(self, plan: PlannedRequest, due_ns: int, outcome: Outcome) -> None:
        built = self.built[plan.index]
        call_ns = outcome.sent_ns = time.perf_counter_ns()
        c = self.counters
        c.sent += 1
        canceller = None
        if plan.cancel_after_ns is not None:
            canceller = asyncio.get_running_loop().call_later(
                plan.cancel_after_ns / 1e9, _stop_task, asyncio.current_task(), outcome, "cancelled"
            )
        try:
            await send(
                self._session,
                self.s.base_url + built.path,
                built.body,
                self.headers[plan.index],
                built.stream,
                outcome,
                plan.cancel_after_tokens,
            )
        finally:
            if canceller is not None:
                canceller.cancel()
            if outcome.on_wire:
                self._learn_lead(outcome.sent_ns - call_ns)
            c.inflight -= 1
            c.done += 1
            lags = c.recent_lags_ns
            lags.append(outcome.sent_ns - due_ns)
            if len(lags) > 4096:
                del lags[:2048]
            if outcome.error_kind is not None:
                c.errors += 1
            self.results.append(Sent(plan, due_ns, outcome))
            self._follow(plan, time.perf_counter_ns())

    def _learn_lead(self, overhead_ns: int) -> None:
        """Smoothed send overhead, three quarters of it, capped: better a hair late than early."""
        estimate = self._lead_ns / LEAD_SHARE if self._lead_ns else overhead_ns
        estimate += (overhead_ns - estimate) * LEAD_SMOOTHING
        self._lead_ns = min(MAX_LEAD_NS, max(0, round(estimate * LEAD_SHARE)))

    def _follow(self, plan: PlannedRequest, ended_ns: int) -> None:
        """Send the session's next turn after this one's answer plus the recorded think time."""
        if plan.next_index is None or self.stopping:
            return
        nxt = self.plans[plan.next_index]
        scheduled = self.s.start_ns + nxt.scheduled_offset_ns
        if self._past_duration(scheduled):
            return
        due = session_due_ns(scheduled, ended_ns, nxt.think_time_ns)
        if due <= time.perf_counter_ns():
            self._dispatch(nxt, due)
            return
        waiter = asyncio.get_running_loop().create_task(self._dispatch_later(nxt, due))
        if not waiter.done():
            self._waiting.add(waiter)
            waiter.add_done_callback(self._waiting_done)

    def _waiting_done(self, task: asyncio.Task) -> None:
        self._waiting.discard(task)
        if not self._inflight and not self._waiting:
            self._idle.set()

    async def _dispatch_later(self, plan: PlannedRequest, due_ns: int) -> None:
        await self._sleep_until(due_ns)
        if not self.stopping:
            self._dispatch(plan, due_ns)

    async def _drain(self) -> None:
        """Wait for the last requests and session turns; after a stop, only for the grace period."""
        while (self._inflight or self._waiting) and not self.stopping:
            self._idle.clear()
            if self._inflight or self._waiting:
                await self._idle.wait()
        if not self._inflight:
            return
        _, pending = await asyncio.wait(set(self._inflight), timeout=self.s.grace_ns / 1e9)
        for task in pending:
            _stop_task(task, self._inflight.get(task), "shutdown")
        if pending:
            await asyncio.wait(pending, timeout=5)


def _stop_task(task: asyncio.Task | None, outcome: Outcome | None, reason: str) -> None:
    if task is None or task.done() or outcome is None:
        return
    outcome.stop_reason = reason
    task.cancel()
