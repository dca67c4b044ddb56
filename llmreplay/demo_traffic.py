"""Sample client traffic for `llmreplay demo`: bounded multi-turn chat conversations over aiohttp.

Stands in for production clients behind the gateway; imports no stage (recorder, replayer, ...).
"""

from __future__ import annotations

import asyncio
import json
import random
from dataclasses import dataclass

SYSTEM_PROMPT_WORDS = 180  # shared by half the conversations, so the trace shows real prefix sharing
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


@dataclass(frozen=True, slots=True)
class TrafficPlan:
    conversations: int = 16
    turns: int = 3
    span_s: float = 15.0  # conversations start uniformly within this window
    think_s: tuple[float, float] = (0.5, 2.0)
    request_timeout_s: float = 60.0
    model: str = "sim-model"
    seed: int = 7


@dataclass(frozen=True, slots=True)
class TrafficResult:
    requests: int
    ok: int
    failed: int


def drive(base_url: str, plan: TrafficPlan) -> TrafficResult:
    """Run every conversation to completion (bounded by turns and timeouts); returns counts."""
    return asyncio.run(_drive(base_url.rstrip("/"), plan))


async def _drive(base_url: str, plan: TrafficPlan) -> TrafficResult:
    import aiohttp
    from faker import Faker

    fake = Faker("en_US")
    fake.seed_instance(plan.seed)
    rng = random.Random(plan.seed)
    system_prompt = " ".join(fake.words(SYSTEM_PROMPT_WORDS))
    timeout = aiohttp.ClientTimeout(total=plan.request_timeout_s)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        tasks = [
            _conversation(session, base_url, plan, i, fake, random.Random(rng.random()), system_prompt)
            for i in range(plan.conversations)
        ]
        outcomes = [ok for results in await asyncio.gather(*tasks) for ok in results]
    return TrafficResult(len(outcomes), sum(outcomes), len(outcomes) - sum(outcomes))


async def _conversation(session, base_url, plan, index, fake, rng, system_prompt) -> list[bool]:
    await asyncio.sleep(rng.uniform(0, plan.span_s))
    messages = [{"role": "system", "content": system_prompt}] if index % 2 == 0 else []
    outcomes = []
    for _ in range(plan.turns):
        words = int(min(1200, rng.lognormvariate(4.5, 0.9)))
        messages.append({"role": "user", "content": " ".join(fake.words(max(3, words)))})
        body = {
            "model": plan.model,
            "messages": messages,
            "max_tokens": rng.randint(16, 96),
            "stream": rng.random() < 0.7,
        }
        if rng.random() < 0.2:
            body["tools"] = [WEATHER_TOOL]
        if body["stream"]:
            body["stream_options"] = {"include_usage": True}
        answer = await _send(session, f"{base_url}/v1/chat/completions", body)
        outcomes.append(answer is not None)
        if answer is None:
            break
        messages.append({"role": "assistant", "content": answer})
        await asyncio.sleep(rng.uniform(*plan.think_s))
    return outcomes


async def _send(session, url: str, body: dict) -> str | None:
    """The assistant's text, or None when the request failed (the recorder records the failure)."""
    try:
        async with session.post(url, json=body) as response:
            if response.status != 200:
                await response.read()
                return None
            if not body["stream"]:
                data = await response.json()
                return data["choices"][0]["message"].get("content") or ""
            return await _read_stream(response)
    except (TimeoutError, OSError, ValueError, KeyError):
        return None
    except Exception as exc:  # aiohttp's own errors: a failed demo request, not a crashed demo
        if type(exc).__module__.startswith("aiohttp"):
            return None
        raise


async def _read_stream(response) -> str:
    parts = []
    async for raw_line in response.content:  # aiohttp splits on newlines across reads
        line = raw_line.strip()
        if not line.startswith(b"data:"):
            continue
        payload = line[5:].strip()
        if payload == b"[DONE]":
            break
        choices = json.loads(payload).get("choices") or []
        if choices:
            parts.append(choices[0].get("delta", {}).get("content") or "")
    return "".join(parts)
