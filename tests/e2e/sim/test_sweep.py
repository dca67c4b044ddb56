"""A concurrency sweep against the `slow` profile: throughput rises then flattens, TTFT rises past the knee.

Closed loop with the official async openai SDK; bounded in requests per level and in time.
"""

from __future__ import annotations

import asyncio
import statistics
import time

import openai
import pytest

from llmreplay.sim.config import build_config

pytestmark = pytest.mark.e2e  # every test here starts processes

LEVELS = {1: 6, 4: 16, 16: 48, 64: 128}  # concurrency -> requests
OUTPUT_TOKENS = 16


async def run_level(base_url: str, concurrency: int, requests: int) -> tuple[float, float]:
    """(completed requests per second, median TTFT in seconds) for one level."""
    client = openai.AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=30)
    remaining = list(range(requests))
    ttfts: list[float] = []

    async def worker():
        while remaining:
            i = remaining.pop()
            started = time.perf_counter()
            stream = await client.chat.completions.create(
                model="sim-model", messages=[{"role": "user", "content": f"Short answer {concurrency}-{i}."}],
                max_tokens=OUTPUT_TOKENS, stream=True, extra_body={"ignore_eos": True},
            )  # fmt: skip
            tokens = 0
            async for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    if tokens == 0:
                        ttfts.append(time.perf_counter() - started)
                    tokens += 1
            assert tokens == OUTPUT_TOKENS

    started = time.perf_counter()
    await asyncio.wait_for(asyncio.gather(*(worker() for _ in range(concurrency))), timeout=60)
    elapsed = time.perf_counter() - started
    await client.close()
    return requests / elapsed, statistics.median(ttfts)


def test_slow_profile_saturates_at_its_knee(module_sim):
    sim = module_sim("--profile", "slow")
    results = {c: asyncio.run(run_level(f"{sim.url}/v1", c, n)) for c, n in LEVELS.items()}
    throughput = {c: r[0] for c, r in results.items()}
    ttft = {c: r[1] for c, r in results.items()}
    print({c: (round(throughput[c], 1), round(ttft[c] * 1e3, 1)) for c in LEVELS})
    # below the knee (16 slots) more concurrency buys throughput ...
    assert throughput[4] > 2.0 * throughput[1]
    assert throughput[16] > 1.5 * throughput[4]
    # ... past it throughput flattens at the engine's capacity and the wait moves into the queue
    slow = build_config("slow", {})
    full_step_s = (slow.decode_base_ms + slow.decode_per_seq_ms * slow.max_num_seqs) / 1e3
    capacity = slow.max_num_seqs / (OUTPUT_TOKENS * full_step_s)  # requests/s with every slot busy
    assert throughput[64] < 1.6 * throughput[16]  # 4x the concurrency, not even 1.6x the throughput
    assert throughput[64] <= 1.05 * capacity
    assert ttft[64] > 3 * ttft[16]
