"""Regenerate samples/content_multiturn.parquet: a synthetic multi-turn content trace (Faker text)
with tools and tool calls, JSON-schema output, streamed and non-streamed requests and plausible timings.

Usage: .venv/bin/python samples/make_content_sample.py [-o PATH] [--sessions N] [--seed S]
Deterministic for a given seed. Token counts come from llmreplay's default tokenizer.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
from dataclasses import dataclass, field
from pathlib import Path

from faker import Faker

from llmreplay.prefix_hash import prefix_block_hashes
from llmreplay.tokenizers import load_tokenizer
from llmreplay.trace_format import MessageShape, TraceMeta, TraceRecord
from llmreplay.trace_io import write_trace
from llmreplay.wire.message_text import message_text

BLOCK_SIZE = 512
SAMPLE_HASH_KEY = b"llmreplay-public-sample-key"  # public on purpose: this trace holds no secrets
T0_US = 1_736_931_600_000_000  # 2025-01-15 09:00:00 UTC
DEFAULT_OUTPUT = Path(__file__).resolve().parent / "content_multiturn.parquet"

TOOLS = {
    "support": [
        {
            "type": "function",
            "function": {
                "name": "lookup_order",
                "description": "Find an order by its number and return its status and items.",
                "parameters": {
                    "type": "object",
                    "properties": {"order_number": {"type": "string", "description": "e.g. A-10293"}},
                    "required": ["order_number"],
                },
            },
        },
        {
            "type": "function",
            "function": {
                "name": "issue_refund",
                "description": "Refund an order, fully or partly.",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "order_number": {"type": "string"},
                        "amount_eur": {"type": "number"},
                        "reason": {"type": "string"},
                    },
                    "required": ["order_number", "amount_eur"],
                },
            },
        },
    ],
    "travel": [
        {
            "type": "function",
            "function": {
                "name": "search_flights",
                "description": "Search direct and one-stop flights between two cities on a date.",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "origin": {"type": "string"},
                        "destination": {"type": "string"},
                        "date": {"type": "string", "format": "date"},
                    },
                    "required": ["origin", "destination", "date"],
                },
            },
        }
    ],
}
CONTACT_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "company": {"type": "string"},
        "email": {"type": "string"},
        "phone": {"type": "string"},
        "topics": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["name", "email"],
    "additionalProperties": False,
}
APPS = ("support", "travel", "extract", "chat")
MODELS = {
    "support": "mistral-small-2501",
    "travel": "mistral-small-2501",
    "extract": "llama-3.1-8b-instruct",
    "chat": "llama-3.1-8b-instruct",
}


@dataclass
class Session:
    number: int
    app: str
    stream: bool
    user_id: str
    messages: list[dict] = field(default_factory=list)


class SampleWriter:
    """Builds the requests of one session after another; all randomness from one seeded source."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.fake = Faker("en_US")
        self.fake.seed_instance(seed)
        self.tokenizer = load_tokenizer()
        self.system_prompts = {app: self._system_prompt(app) for app in APPS}

    def _system_prompt(self, app: str) -> str:
        rules = " ".join(self.fake.paragraph(nb_sentences=8) for _ in range(10))
        return f"You are the {app} assistant of {self.fake.company()}. Follow these house rules.\n\n{rules}"

    def session_records(self, number: int, start_us: int) -> list[TraceRecord]:
        app = self.rng.choice(APPS)
        session = Session(
            number, app, stream=self.rng.random() < 0.7, user_id=_pseudo_id("user", number % 17)
        )
        session.messages.append({"role": "system", "content": self.system_prompts[app]})
        records: list[TraceRecord] = []
        arrival_us, pending, retry = start_us, None, False
        for turn in range(self.rng.randint(1, 6) * (2 if app in TOOLS else 1)):
            if pending:
                session.messages.extend(pending)
            elif not retry:  # a retry after 429 resends the same messages
                session.messages.append({"role": "user", "content": self._user_text(app)})
            record, pending = self._request(session, turn, arrival_us, records[-1] if records else None)
            records.append(record)
            retry = record.error_kind is not None
            arrival_us += (record.e2e_ns + self._pause_ns(record, pending)) // 1000
        return records

    def _user_text(self, app: str) -> str:
        if app == "support":
            return f"My order A-{self.rng.randint(10000, 99999)} {self.fake.sentence(nb_words=14)} {self.fake.sentence()}"
        if app == "travel":
            return f"I need a flight from {self.fake.city()} to {self.fake.city()} on {self.fake.date_this_year()}. {self.fake.sentence()}"
        if app == "extract":
            return (
                "Extract the contact details from this email:\n\n"
                + self.fake.paragraph(nb_sentences=6)
                + (
                    f"\n{self.fake.name()}, {self.fake.company()}\n{self.fake.email()} {self.fake.phone_number()}"
                )
            )
        return self.fake.paragraph(nb_sentences=self.rng.randint(1, 5))

    def _request(self, session: Session, turn: int, arrival_us: int, previous: TraceRecord | None):
        app, rng = session.app, self.rng
        tools = TOOLS.get(app)
        wants_tool = tools is not None and session.messages[-1]["role"] == "user" and rng.random() < 0.6
        response_text, tool_calls = None, None
        if wants_tool:
            tool_calls = [self._tool_call(tools[rng.randrange(len(tools))], session.number, turn)]
        elif app == "extract":
            response_text = json.dumps(
                {
                    "name": self.fake.name(),
                    "email": self.fake.email(),
                    "company": self.fake.company(),
                    "topics": self.fake.words(3),
                }
            )
        else:
            response_text = "\n\n".join(
                self.fake.paragraph(nb_sentences=rng.randint(3, 9)) for _ in range(rng.randint(1, 4))
            )
        message_shapes, token_ids = self._shape(session.messages)
        tool_tokens = self.tokenizer.count(json.dumps(tools)) if tools else 0
        prompt_tokens = len(token_ids) + tool_tokens  # as the recorder counts it: messages and tool definitions
        max_tokens = rng.choice([None, 256, 1024])
        completion_text = response_text if response_text is not None else json.dumps(tool_calls)
        completion_tokens = self.tokenizer.count(completion_text)
        finish = "tool_calls" if tool_calls else "stop"
        if max_tokens is not None and completion_tokens > max_tokens and not tool_calls:
            response_text = self.tokenizer.decode(self.tokenizer.encode(response_text)[:max_tokens])
            completion_tokens, finish = max_tokens, "length"
        rate_limited = previous is not None and previous.error_kind is None and rng.random() < 0.04
        timings = self._timings(prompt_tokens, completion_tokens, session.stream, rate_limited)
        request_id = f"chatcmpl-sample-{session.number:03d}-{turn:02d}"
        record = TraceRecord(
            request_id=request_id,
            arrival_time=arrival_us,
            endpoint="chat_completions",
            prompt_tokens=prompt_tokens,
            token_source="tokenizer",
            session_id=f"sess-{session.number:03d}",
            turn_index=turn,
            parent_request_id=previous.request_id if previous else None,
            think_time_ns=self._last_pause_ns if previous else None,
            model=MODELS[app],
            stream=session.stream,
            user_id=session.user_id,
            api_key_hash=_pseudo_id("key", APPS.index(app)),
            http_status=429 if rate_limited else 200,
            error_kind="rate_limited_429" if rate_limited else None,
            retry_after_ms=1000 if rate_limited else None,
            completion_tokens=None if rate_limited else completion_tokens,
            max_tokens=max_tokens,
            temperature=None if app == "extract" else round(rng.choice([0.2, 0.7, 1.0]), 1),
            top_p=rng.choice([None, 0.9]),
            n=rng.choice([None, 1]),
            stop_present=rng.random() < 0.15,
            seed=rng.choice([None, None, 42]),
            tools_count=len(tools) if tools else 0,
            tool_definition_tokens=tool_tokens,
            tool_choice="auto" if tools else None,
            tool_calls_count=0 if rate_limited or not tool_calls else len(tool_calls),
            structured_output="json_schema" if app == "extract" else "none",
            schema_tokens=self.tokenizer.count(json.dumps(CONTACT_SCHEMA)) if app == "extract" else 0,
            messages=message_shapes,
            prefix_block_hashes=tuple(prefix_block_hashes(token_ids, BLOCK_SIZE, SAMPLE_HASH_KEY)),
            finish_reason=None if rate_limited else finish,
            content_messages=json.dumps(session.messages),
            content_tools=json.dumps(tools) if tools else None,
            content_response_format=json.dumps(_response_format()) if app == "extract" else None,
            content_response=None if rate_limited else response_text,
            content_tool_calls=json.dumps(tool_calls) if tool_calls and not rate_limited else None,
            **timings,
        )
        if rate_limited:
            return record, None
        session.messages.append(_assistant_message(response_text, tool_calls))
        pending = [self._tool_result(call) for call in tool_calls] if tool_calls else None
        return record, pending

    def _tool_call(self, tool: dict, session_number: int, turn: int) -> dict:
        name = tool["function"]["name"]
        if name == "lookup_order":
            arguments = {"order_number": f"A-{self.rng.randint(10000, 99999)}"}
        elif name == "issue_refund":
            arguments = {
                "order_number": f"A-{self.rng.randint(10000, 99999)}",
                "amount_eur": round(self.rng.uniform(5, 300), 2),
            }
        else:
            arguments = {
                "origin": self.fake.city(),
                "destination": self.fake.city(),
                "date": str(self.fake.date_this_year()),
            }
        call_id = f"call_{session_number:03d}{turn:02d}"
        return {
            "id": call_id,
            "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments)},
        }

    def _tool_result(self, call: dict) -> dict:
        result = {
            "status": self.rng.choice(["shipped", "delivered", "ok", "pending"]),
            "note": self.fake.sentence(),
        }
        return {"role": "tool", "tool_call_id": call["id"], "content": json.dumps(result)}

    def _shape(self, messages: list[dict]) -> tuple[tuple[MessageShape, ...], list[int]]:
        """Per-message token counts and the concatenated token ids (no chat template), as hashed."""
        shapes, ids = [], []
        for message in messages:
            tokens = self.tokenizer.encode(message_text(message)[1])
            shapes.append(MessageShape(message["role"], len(tokens)))
            ids.extend(tokens)
        return tuple(shapes), ids

    def _timings(self, prompt_tokens: int, completion_tokens: int, stream: bool, rate_limited: bool) -> dict:
        rng = self.rng
        ttfb_ns = int(rng.uniform(15, 60) * 1e6)
        if rate_limited:
            return {"ttfb_ns": ttfb_ns, "e2e_ns": (ttfb_ns + 300_000) // 1000 * 1000}
        prefill_ns = int((120 + prompt_tokens * 0.06) * rng.lognormvariate(0, 0.25) * 1e6)
        itl_ms = rng.uniform(18, 32)
        offsets, t = [], ttfb_ns + prefill_ns
        for _ in range(completion_tokens):
            offsets.append(t)
            t += int(itl_ms * rng.lognormvariate(0, 0.2) * 1e6)
        e2e_ns = (offsets[-1] + int(rng.uniform(1, 4) * 1e6)) // 1000 * 1000
        if not stream:
            return {"ttfb_ns": e2e_ns - 500_000, "e2e_ns": e2e_ns}
        return {
            "ttfb_ns": ttfb_ns,
            "ttft_ns": offsets[0],
            "e2e_ns": e2e_ns,
            "chunk_offsets_ns": tuple(offsets),
        }

    def _pause_ns(self, record: TraceRecord, pending_tool) -> int:
        if record.error_kind:
            pause_ms = record.retry_after_ms
        elif pending_tool:
            pause_ms = self.rng.uniform(40, 400)  # the client runs the tool
        else:
            pause_ms = self.rng.lognormvariate(9.3, 0.6)  # a person reads and types: ~11 s median
        self._last_pause_ns = int(pause_ms * 1000) * 1000  # whole microseconds, like arrival times
        return self._last_pause_ns


def _assistant_message(text: str | None, tool_calls: list | None) -> dict:
    message = {"role": "assistant", "content": text}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return message


def _response_format() -> dict:
    return {
        "type": "json_schema",
        "json_schema": {"name": "contact", "strict": True, "schema": CONTACT_SCHEMA},
    }


def _pseudo_id(kind: str, number: int) -> str:
    return hashlib.sha256(f"sample-{kind}-{number}".encode()).hexdigest()[:16]


def make_sample(sessions: int, seed: int) -> list[TraceRecord]:
    writer = SampleWriter(seed)
    rng = random.Random(seed + 1)
    start_us, records = T0_US, []
    for number in range(sessions):
        start_us += int(rng.expovariate(1 / 12.0) * 1e6)  # a new conversation every ~12 s
        records.extend(writer.session_records(number, start_us))
    return sorted(records, key=lambda r: r.arrival_time)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--output", type=Path, default=DEFAULT_OUTPUT)
    parser.add_argument("--sessions", type=int, default=40)
    parser.add_argument("--seed", type=int, default=2025)
    args = parser.parse_args()
    records = make_sample(args.sessions, args.seed)
    meta = TraceMeta(
        source="samples/make_content_sample.py",
        block_size=BLOCK_SIZE,
        tokenizer=load_tokenizer().id,
        content=True,
        extra={"synthetic": True, "seed": args.seed, "sessions": args.sessions},
    )
    write_trace(args.output, records, meta)
    print(f"wrote {len(records)} requests in {args.sessions} sessions to {args.output}")


if __name__ == "__main__":
    main()
