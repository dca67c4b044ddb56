"""Anonymizer throughput (prompt tokens/s on one core, default tokenizer) and peak RSS.

Builds a synthetic multi-turn content trace (shared system prompts, unique user turns, answers
repeated as history, some tool definitions), then runs `llmreplay anonymize` in a child process
pinned to one CPU and reads its own timing (--json) and the child's peak RSS, sampled from /proc
as it runs: the peak reached by 10%, 25%, 50%, 75% and 100% of the run shows whether memory is flat.

    .venv/bin/python benchmarks/bench_anonymize.py --requests 20000
    .venv/bin/python benchmarks/bench_anonymize.py --requests 1000000                # 2.9 GB trace, ~10 min to build
    .venv/bin/python benchmarks/bench_anonymize.py --requests 1000000 --no-content   # shape-only 1M rows
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from llmreplay.prefix_hash import prefix_block_hashes  # noqa: E402
from llmreplay.tokenizers import load_tokenizer  # noqa: E402
from llmreplay.trace_format import MessageShape, TraceMeta, TraceRecord  # noqa: E402
from llmreplay.trace_io import TraceWriter  # noqa: E402

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "search_orders",
            "description": "Search the customer's orders by date range and status",
            "parameters": {
                "type": "object",
                "properties": {
                    "status": {"type": "string", "enum": ["open", "shipped", "returned"]},
                    "since": {"type": "string", "format": "date"},
                },
                "required": ["status"],
            },
        },
    }
]


def build_trace(
    path: Path, requests: int, content: bool, concurrent_sessions: int = 256, seed: int = 1
) -> None:
    """Sessions of 1-8 turns, interleaved; prompts carry the whole history, as chat clients send it."""
    from faker import Faker

    fake = Faker("en_US")
    fake.seed_instance(seed)
    rng = random.Random(seed)
    tokenizer = load_tokenizer()
    sentences = [fake.sentence(nb_words=rng.randint(6, 24)) for _ in range(4000)]
    systems = [" ".join(rng.choices(sentences, k=rng.randint(20, 90))) for _ in range(6)]
    counts: dict[str, int] = {}

    def count(text: str) -> int:
        if not content:  # shape-only: no text to match, so skip tokenizing (about 4 chars a token)
            return len(text) // 4
        found = counts.get(text)
        if found is None:
            found = counts[text] = tokenizer.count(text)
            if len(counts) > 200_000:
                counts.clear()
        return found

    meta = TraceMeta(source="bench", tokenizer=tokenizer.id, content=content)
    tools_json = json.dumps(TOOLS, separators=(",", ":"))
    next_session = 0

    def new_session() -> dict:
        nonlocal next_session
        next_session += 1
        system = {"role": "system", "content": rng.choice(systems)}
        return {
            "id": next_session,
            "history": [system],
            "turns": rng.randint(1, 8),
            "turn": 0,
            "parent": None,
        }

    # Sessions interleave, as at a real gateway: the history cache must hold every active one.
    active = [new_session() for _ in range(concurrent_sessions)]
    with TraceWriter(path, meta) as writer:
        batch: list[TraceRecord] = []
        for index in range(requests):
            slot = rng.randrange(len(active))
            state = active[slot]
            turn, history = state["turn"], state["history"]
            user = f"[{state['id']}/{turn}] " + " ".join(rng.choices(sentences, k=rng.randint(2, 25)))
            history = history + [{"role": "user", "content": user}]
            answer = " ".join(rng.choices(sentences, k=rng.randint(3, 30)))
            shapes = tuple(MessageShape(m["role"], count(m["content"])) for m in history)
            prompt_tokens = sum(s.tokens for s in shapes)
            record = TraceRecord(
                request_id=f"r{index}",
                arrival_time=1_700_000_000_000_000 + index * 10_000,
                endpoint="chat_completions",
                prompt_tokens=prompt_tokens,
                token_source="tokenizer",
                session_id=f"s{state['id']}",
                turn_index=turn,
                parent_request_id=state["parent"],
                user_id=f"user{state['id'] % 997}",
                completion_tokens=count(answer),
                tools_count=1,
                tool_definition_tokens=count(tools_json),
                messages=shapes,
                prefix_block_hashes=tuple(
                    prefix_block_hashes(range(prompt_tokens), 512, str(state["id"]).encode())
                ),
                content_messages=json.dumps(history, separators=(",", ":")) if content else None,
                content_tools=tools_json if content else None,
                content_response=answer if content else None,
            )
            batch.append(record)
            state.update(
                history=history + [{"role": "assistant", "content": answer}],
                turn=turn + 1,
                parent=record.request_id,
            )
            if state["turn"] >= state["turns"]:
                active[slot] = new_session()
            if len(batch) >= 4096:
                writer.write_records(batch)
                batch = []
        if batch:
            writer.write_records(batch)


def run_anonymize(trace: Path, out: Path, key: Path, cpu: int) -> tuple[dict, float, int, list]:
    """Anonymize in a child pinned to one CPU, sampling its memory from /proc as it runs.

    Returns (its --json result, wall seconds, peak RSS bytes, samples of (seconds, RSS, peak RSS)).
    """
    cmd = [
        sys.executable,
        "-m",
        "llmreplay.cli",
        "anonymize",
        str(trace),
        "-o",
        str(out),
        "--key-file",
        str(key),
    ]
    started = time.perf_counter()
    proc = subprocess.Popen(
        [*cmd, "--force", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        preexec_fn=lambda: os.sched_setaffinity(0, {cpu}),
    )
    samples = []
    while proc.poll() is None:
        memory = _memory_bytes(proc.pid)
        if memory is not None:
            samples.append((time.perf_counter() - started, *memory))
        time.sleep(SAMPLE_EVERY_S)
    stdout, stderr = proc.communicate()
    wall_s = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"anonymize failed ({proc.returncode}): {stderr.strip()[-2000:]}")
    peak_rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024  # Linux: KiB
    return json.loads(stdout), wall_s, peak_rss, samples


SAMPLE_EVERY_S = 0.2
RUN_FRACTIONS = (0.1, 0.25, 0.5, 0.75, 1.0)


def _memory_bytes(pid: int) -> tuple[int, int] | None:
    """(RSS, peak RSS so far) of a running process, from /proc (None once it has exited)."""
    try:
        fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
        return int(fields["VmRSS"].split()[0]) * 1024, int(fields["VmHWM"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        return None


def print_memory_profile(samples: list, wall_s: float, peak_rss: int) -> None:
    """Peak RSS reached by each fraction of the run (wall time, so start-up counts in the first part)."""
    if not samples:
        return
    parts = []
    for fraction in RUN_FRACTIONS:
        upto = [hwm for seconds, _, hwm in samples if seconds <= fraction * wall_s]
        peak = peak_rss if fraction == 1.0 else max(upto, default=0)
        parts.append(f"{fraction:.0%} {peak / 2**20:.0f}")
    print(f"peak RSS by share of the run (MiB): {', '.join(parts)}")
    half = max((hwm for seconds, _, hwm in samples if seconds <= 0.5 * wall_s), default=0)
    if half:
        print(f"flatness: peak RSS grew {(peak_rss - half) / 2**20:+.0f} MiB over the second half of the run")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument(
        "--no-content", action="store_true", help="a shape-only trace (ids and hashes re-keyed)"
    )
    parser.add_argument(
        "--workdir", type=Path, default=Path(tempfile.gettempdir()) / "llmreplay-bench-anonymize"
    )
    parser.add_argument("--cpu", type=int, default=0, help="the CPU to pin the anonymizer to")
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    kind = "shape" if args.no_content else "content"
    trace = args.workdir / f"{kind}-{args.requests}.parquet"
    if not trace.exists():
        started = time.perf_counter()
        build_trace(trace, args.requests, content=not args.no_content)
        print(f"built {trace} ({trace.stat().st_size / 1e6:.1f} MB) in {time.perf_counter() - started:.1f}s")
    key = args.workdir / "bench.key"
    if not key.exists():
        key.write_bytes(os.urandom(32))
        key.chmod(0o600)
    result, wall_s, peak_rss, samples = run_anonymize(
        trace, args.workdir / f"{kind}-{args.requests}.anon.parquet", key, args.cpu
    )
    tokens, elapsed = result["prompt_tokens"], result["elapsed_s"]
    print(f"trace: {result['rows']} requests ({kind}), {tokens} prompt tokens")
    cpu_s = result["cpu_s"]
    print(
        f"anonymize: {cpu_s:.2f}s CPU, {elapsed:.2f}s wall in-pipeline, {wall_s:.2f}s wall incl. start-up, CPU {args.cpu}"
    )
    print(
        f"throughput per CPU-second: {tokens / cpu_s / 1e6:.2f}M prompt tokens/s ({result['rows'] / cpu_s:.0f} requests/s)"
    )
    print(
        f"throughput per wall-second (machine shared, noisy): {tokens / elapsed / 1e6:.2f}M prompt tokens/s"
    )
    print(
        f"messages: {result['messages']}, generated {result['messages_generated']} (rest from the history cache)"
    )
    print(
        f"exact token counts: {result['texts_exact']}/{result['texts']} ({100 * result['exact_rate']:.3f}%)"
    )
    print(f"peak RSS of the anonymizer process: {peak_rss / 2**20:.0f} MiB")
    print_memory_profile(samples, wall_s, peak_rss)


if __name__ == "__main__":
    main()
