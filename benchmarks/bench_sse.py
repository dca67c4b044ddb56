"""The replay loop's SSE reader (replayer/loop/sse.py) per chunk, for each grammar: chat chunks, the
Responses API's typed events, Anthropic Messages' typed events. Prints the median ns per text event
over repeated streams, one read per event (a server flushing each event), and all events in one read.

    .venv/bin/python benchmarks/bench_sse.py [--events 400] [--repeats 30]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from replayer.loop.sse import SseStream


def _data(event: dict, name: str | None = None) -> bytes:
    line = f"data: {json.dumps(event, separators=(',', ':'))}\n\n"
    return (f"event: {name}\n{line}" if name else line).encode()


def chat(texts: list[str]) -> list[bytes]:
    chunk = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "tiny"}
    events = [
        _data({**chunk, "choices": [{"index": 0, "delta": {"content": t}, "finish_reason": None}]})
        for t in texts
    ]
    end = {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
    usage = {**chunk, "choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": len(texts)}}
    return [*events, _data(end), _data(usage), b"data: [DONE]\n\n"]


def responses(texts: list[str]) -> list[bytes]:
    """vLLM's field order (the openai types, alphabetical) and event lines."""
    kind = "response.output_text.delta"
    events = [
        _data(
            {
                "content_index": 0,
                "delta": t,
                "item_id": "msg_1",
                "logprobs": [],
                "output_index": 0,
                "sequence_number": i + 1,
                "type": kind,
            },
            kind,
        )  # fmt: skip
        for i, t in enumerate(texts)
    ]
    response = {
        "id": "resp_1",
        "status": "completed",
        "output": [],
        "usage": {"input_tokens": 9, "output_tokens": len(texts)},
    }
    created = _data(
        {"response": {**response, "status": "in_progress", "usage": None}, "type": "response.created"},
        "response.created",
    )
    done = _data({"response": response, "type": "response.completed"}, "response.completed")
    return [created, *events, done]


def messages(texts: list[str]) -> list[bytes]:
    start = {
        "type": "message_start",
        "message": {"id": "msg_1", "usage": {"input_tokens": 9, "output_tokens": 1}},
    }
    events = [
        _data(
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": t}},
            "content_block_delta",
        )
        for t in texts
    ]
    delta = {
        "type": "message_delta",
        "delta": {"stop_reason": "end_turn"},
        "usage": {"output_tokens": len(texts)},
    }
    return [
        _data(start, "message_start"),
        *events,
        _data(delta, "message_delta"),
        _data({"type": "message_stop"}, "message_stop"),
    ]


GRAMMARS = {"chat": ("chat", chat), "responses": ("responses", responses), "messages": ("messages", messages)}


def ns_per_event(dialect: str, reads: list[bytes], repeats: int) -> float:
    """Median over `repeats` streams of the feed time per read."""
    samples = []
    for _ in range(repeats):
        sse = SseStream(0, dialect)
        feed = sse.feed
        t0 = time.perf_counter_ns()
        for i, read in enumerate(reads):
            feed(read, i)
        samples.append((time.perf_counter_ns() - t0) / len(reads))
        assert sse.done and sse.error is None and sse.invalid is None
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--events", type=int, default=400, help="text events a stream (bounded: at most 100,000)"
    )
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    texts = [f" word{i % 97}" for i in range(min(args.events, 100_000))]
    print(f"{'grammar':10} {'ns/event (one read each)':>26} {'ns/event (one read)':>21}")
    for name, (dialect, build) in GRAMMARS.items():
        reads = build(texts)
        each = ns_per_event(dialect, reads, args.repeats)
        whole = ns_per_event(dialect, [b"".join(reads)], args.repeats) / len(reads)
        print(f"{name:10} {each:26.0f} {whole:21.0f}")


if __name__ == "__main__":
    main()
