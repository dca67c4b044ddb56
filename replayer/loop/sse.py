"""Incremental reader of an OpenAI-style SSE stream, fed raw bytes with each read's timestamp; keeps
`event:` names (a stream error) that llmreplay.sse.SSESplitter drops. No regex, no split on the fast
path; imports nothing from the rest of replayer. Why: docs/design/replay-loop.md#sse-without-a-regex-ssepy."""

from __future__ import annotations

import re
from array import array

import orjson

from llmreplay.wire.channels import (
    ANSWER,
    REASONING,
    choice_delta,
    event_channel,
    text_keys,
)
from llmreplay.wire.dialects import DIALECTS, Dialect
from llmreplay.wire.error_object import error_object_kind, error_text
from llmreplay.wire.json_array import array_items
from llmreplay.wire.stream_end import missing_end
from llmreplay.wire.usage import merge_usage

# A key outside a JSON string always starts with an unescaped quote, so these byte patterns cannot
# be fooled by generated text (whose quotes arrive escaped).
# A null value needs no parse: SGLang sends `"tool_calls":null` and `"usage":null` in every chunk.
_CR = 13
MAX_EVENT_BYTES = 1 << 20  # an SSE event (a line without its end) longer than this is an invalid stream
LONG_EVENT_BYTES = 1 << 16  # an unterminated tail this long is kept as a list of reads, not re-joined
_NEEDS_PARSE = re.compile(rb'"(?:tool_calls|error|usage|finish_reason)" *: *[^ n]')


def _text_pattern(channel: str) -> re.Pattern[bytes]:
    """A key of `channel` holding a non-empty string."""
    keys = b"|".join(key.encode() for key in text_keys(channel))
    return re.compile(rb'"(?:' + keys + rb')" *: *"[^"]')


_ANSWER_TEXT = _text_pattern(ANSWER)
_REASONING_TEXT = _text_pattern(REASONING)
FRAMINGS_LEARNED_MAX = 4  # a server whose chunks vary outside the text (a per-chunk nonce) stops teaching
_NUMBER_VALUE = re.compile(rb'":(\d+)[,}]')  # a key's non-negative integer value, compact JSON


def _keys_pattern(keys) -> re.Pattern[bytes]:
    """One of `keys` holding a non-empty string."""
    return re.compile(rb'"(?:' + b"|".join(key.encode() for key in keys) + rb')" *: *"[^"]')


def _typed_rules(dialect: Dialect) -> dict[bytes, tuple | None]:
    """By `event:` name: the (byte pattern, channel) pairs that find its tokens without a parse
    (dialect.delta_rules), or None when the event is parsed (its facts: dialect.event_facts). A name
    absent is skipped: it carries no tokens and nothing else the loop reads."""
    rules = {
        name: tuple((_keys_pattern(keys), ch) for keys, ch in pairs)
        for name, pairs in dialect.delta_rules.items()
    }
    rules.update(dict.fromkeys(("error", *dialect.end_events, *dialect.parsed_events)))
    return {name.encode(): rule for name, rule in rules.items()}


_SKIP = ()  # a rule's placeholder for an event name with no rule
TYPED_RULES = {name: _typed_rules(d) for name, d in DIALECTS.items() if d.typed_events}


def _rules_of(dialect: Dialect) -> dict[bytes, tuple | None] | None:
    """A typed dialect's rules, built once (a row added after import too); None for chat chunks."""
    if not dialect.typed_events:
        return None
    rules = TYPED_RULES.get(dialect.name)
    return rules if rules is not None else TYPED_RULES.setdefault(dialect.name, _typed_rules(dialect))


class SseStream:
    """State of one streamed response; `feed(bytes, arrival_ns)` for every network read."""

    __slots__ = (
        "start_ns",
        "_buffer",
        "_parts",
        "_parts_bytes",
        "overflow",
        "chunk_offsets_ns",
        "first_answer",
        "reasoning_chunks",
        "done",
        "finish_reason",
        "usage",
        "error",
        "invalid",
        "tool_call_ids",
        "events",
        "_head",
        "_tail",
        "_before_hole",
        "_head_reasoning",
        "_framings_learned",
        "response_id",
        "_dialect",
        "_rules",
    )

    def __init__(self, start_ns: int, dialect: str = "chat"):
        self.start_ns = start_ns
        self._dialect = DIALECTS[dialect]
        self._rules = _rules_of(self._dialect)  # None: chat chunks (the path below)
        self.response_id: str | None = None  # typed streams: response.created's / message_start's id
        self._buffer = b""
        # a long unterminated event, kept as its reads (joined once, when an event end may have come)
        self._parts: list[bytes] | None = None
        self._parts_bytes = 0
        self.overflow = False  # an event longer than MAX_EVENT_BYTES: the stream is invalid, not buffered
        # arrival of each chunk carrying tokens (reasoning included), from start_ns; 8 bytes a chunk
        self.chunk_offsets_ns = array("q")
        self.first_answer = -1  # index in chunk_offsets_ns of the first answer chunk; -1: none yet
        self.reasoning_chunks = 0  # chunks carrying reasoning tokens only
        self.done = False  # saw `data: [DONE]`
        self.finish_reason: str | None = None
        self.usage: dict | None = None
        self.error: str | None = None  # first line of an in-stream error
        self.invalid: str | None = None  # why the stream is not the OpenAI wire format
        self.tool_call_ids: set = set()
        self.events = 0
        # the learned framing of a text chunk: b"data: {...\"content\":\"" and b"\"}...}\n\n"
        self._head: bytes | None = None
        self._tail = b""
        self._before_hole: bytes | None = None  # the framing's bytes from the text to its number hole
        self._head_reasoning = False  # the learned framing's text is reasoning
        self._framings_learned = 0

    @property
    def content_chunks(self) -> int:
        return len(self.chunk_offsets_ns)

    def feed(self, data: bytes, arrival_ns: int) -> None:
        if self._parts is not None and self._kept_as_part(data):
            return
        if self._buffer:
            data = self._after_tail(data)
        if data.find(b"\r") >= 0:  # not `in`: bytes.__contains__ first raises and clears a TypeError
            self._feed_cr(data, arrival_ns)
            return
        head = self._head
        if head is not None and data.endswith(self._tail) and data.startswith(head):
            # One text chunk in the learned framing, if the text between holds no quote: a second
            # event glued on, or any other key, would put the tail's opening quote in there. A framing
            # with a number hole (Responses' sequence_number): the text's closing quote, the bytes up
            # to the hole, digits only, then the tail.
            text_end = len(data) - len(self._tail)
            quote = data.find(b'"', len(head), text_end)
            before = self._before_hole
            if (quote < 0 and len(head) < text_end and before is None) or (
                before is not None
                and quote > len(head)
                and data.startswith(before, quote)
                and data[quote + len(before) : text_end].isdigit()
            ):
                self._buffer = b""
                self.events += 1
                self.chunk_offsets_ns.append(arrival_ns - self.start_ns)
                if self._head_reasoning:  # an answer framing is learned from an answer chunk
                    self.reasoning_chunks += 1
                return
        events = data.split(b"\n\n")
        self._buffer = events.pop()  # the unterminated tail; b"" when the read ended an event
        if len(self._buffer) >= LONG_EVENT_BYTES:
            self._keep_tail_as_parts()
        if self._rules is not None:
            self._typed_events(events, arrival_ns)
            return
        for event in events:
            # the common chunk, inline (a call per chunk costs): one JSON data line; _event's first case
            if event[:7] == b"data: {" and event.find(b"\n") < 0:
                self.events += 1
                payload = event[6:]
                if _NEEDS_PARSE.search(payload) is not None:
                    self._parsed(payload, arrival_ns)
                    continue
                text = _ANSWER_TEXT.search(payload)
                if text is not None:
                    if self.first_answer < 0:
                        self.first_answer = len(self.chunk_offsets_ns)
                    self.chunk_offsets_ns.append(arrival_ns - self.start_ns)
                    if self._framings_learned < FRAMINGS_LEARNED_MAX:
                        self._learn_framing(event, 6 + text.end() - 1, False)
                    continue
                text = _REASONING_TEXT.search(payload)
                if text is not None:
                    self.reasoning_chunks += 1
                    self.chunk_offsets_ns.append(arrival_ns - self.start_ns)
                    if self._framings_learned < FRAMINGS_LEARNED_MAX:
                        self._learn_framing(event, 6 + text.end() - 1, True)
            elif event:
                self._event(event, arrival_ns)

    def _kept_as_part(self, data: bytes) -> bool:
        """A read while a long event is kept as reads: True when it was kept (the event goes on, no
        join, no copy) or dropped (overflow); else the reads are joined once into the buffer."""
        parts = self._parts
        if self.overflow:
            return True
        last = parts[-1][-1:]
        if (
            data.find(b"\n\n") < 0
            and data.find(b"\r") < 0
            and last != b"\r"
            and not (last == b"\n" and data[:1] == b"\n")
        ):  # the event goes on: no join, no copy
            parts.append(data)
            self._parts_bytes += len(data)
            if self._parts_bytes > MAX_EVENT_BYTES:
                self._overflowed()
            return True
        self._buffer, self._parts = b"".join(parts), None
        return False

    def _after_tail(self, data: bytes) -> bytes:
        """The last read's unterminated tail (not empty) and this read, one bytes: a CR ending the
        tail's line pairs with a LF opening this read (one line end, not two)."""
        buffer = self._buffer
        if buffer[-1] == _CR:
            buffer = buffer[:-1]
            if data[:1] == b"\n":
                data = data[1:]
        return buffer + data

    def _keep_tail_as_parts(self) -> None:
        """An unterminated tail of LONG_EVENT_BYTES or more is kept from here on as reads, joined once
        (not re-joined with every read), and refused past MAX_EVENT_BYTES."""
        self._parts, self._parts_bytes, self._buffer = [self._buffer], len(self._buffer), b""
        if self._parts_bytes > MAX_EVENT_BYTES:
            self._overflowed()

    def _typed_events(self, events: list[bytes], arrival_ns: int) -> None:
        """Responses / Messages events: the `event:` name picks the rule (a dict lookup), a byte
        pattern finds the tokens of a delta; the few other events are parsed."""
        rules = self._rules
        for event in events:
            if event[:7] == b"event: ":
                line_end = event.find(b"\n", 7)
                if (
                    line_end > 0
                    and event[line_end + 1 : line_end + 7] == b"data: "
                    and event.find(b"\n", line_end + 1) < 0
                ):
                    self.events += 1
                    rule = rules.get(event[7:line_end], _SKIP)
                    if rule is _SKIP:
                        continue
                    if rule is None:
                        self._typed_parsed(
                            event[line_end + 7 :], event[7:line_end].decode("latin-1"), arrival_ns
                        )
                        continue
                    for pattern, channel in rule:  # searched in place: no copy of the payload
                        text = pattern.search(event, line_end + 7)
                        if text is not None:
                            self._stamp(channel, arrival_ns)
                            if self._framings_learned < FRAMINGS_LEARNED_MAX:
                                self._learn_framing(event, text.end() - 1, channel == REASONING)
                            break
                    continue
            if event:
                self._event(event, arrival_ns)

    def _typed_parsed(self, payload: bytes, name: str | None, arrival_ns: int | None) -> None:
        """A Responses / Messages event read whole: its facts and its channel."""
        obj = self._loads(payload)
        if obj is None:
            return
        kind = obj.get("type") if isinstance(obj.get("type"), str) else name
        if kind is None:
            return
        facts = self._dialect.event_facts(kind, obj)
        if facts.failed is not None:
            self.error = self.error or facts.failed
            return
        if facts.usage is not None:
            self.usage = merge_usage(self.usage, facts.usage)
        self.finish_reason = facts.finish_reason or self.finish_reason
        self.done |= facts.done
        self.response_id = facts.response_id or self.response_id
        if facts.call_key is not None:
            self.tool_call_ids.add(facts.call_key)
        channel = self._dialect.event_channel(kind, obj)
        if channel is not None and arrival_ns is not None:
            self._stamp(channel, arrival_ns)

    def _overflowed(self) -> None:
        self.overflow = True
        self.invalid = self.invalid or f"an SSE event longer than {MAX_EVENT_BYTES >> 20} MB"
        self._parts, self._buffer = [b"x"], b""  # nothing more is kept

    def _feed_cr(self, data: bytes, arrival_ns: int) -> None:
        """A read with CR line ends (WHATWG: CRLF, CR or LF): a CR ends its line at once, as in the
        recorder's splitter; a CR at the very end leaves a marker so the next read's LF is dropped."""
        self._buffer = b""
        self.feed(data.replace(b"\r\n", b"\n").replace(b"\r", b"\n"), arrival_ns)
        if data[-1] == _CR and not self.overflow:
            if self._parts is not None:
                self._parts.append(b"\r")
            else:
                self._buffer += b"\r"

    def _learn_framing(self, event: bytes, text_start: int, reasoning: bool) -> None:
        """Remember the bytes around this plain text chunk's text (which starts at `text_start`),
        with a hole at the tail's last number: Responses' sequence_number changes every event."""
        self._framings_learned += 1
        text_end = _string_end(event, text_start)
        if text_end > text_start:
            tail = event[text_end:] + b"\n\n"
            numbers = [number.span(1) for number in _NUMBER_VALUE.finditer(tail)]
            self._head = event[:text_start]
            self._tail = tail[numbers[-1][1] :] if numbers else tail
            self._before_hole = tail[: numbers[-1][0]] if numbers else None
            self._head_reasoning = reasoning

    def missing_end(self) -> str | None:
        """What the ended stream lacks to be whole (its end event, a finish reason); None: nothing."""
        return missing_end(self.done, self.finish_reason, self._dialect.end_events)

    def finish(self, end_ns: int | None = None) -> None:
        """End of body: an unterminated last event still counts (some servers omit the blank line),
        stamped `end_ns` (the last read), as the recorder stamps it."""
        if self._parts is not None:
            self._buffer, self._parts = (b"" if self.overflow else b"".join(self._parts)), None
        rest = self._buffer.rstrip(b"\r\n")
        self._buffer = b""
        if rest:
            self._event(rest, end_ns)

    def _event(self, event: bytes, arrival_ns: int | None) -> None:
        self.events += 1
        chat = self._rules is None
        if chat and event[:7] == b"data: {" and event.find(b"\n") < 0:  # the common chunk: one JSON data line
            self._json_event(event[6:], arrival_ns)
            return
        if event.startswith(b"data:") and event.find(b"\n") < 0:
            payload = event[6:] if event[5:6] == b" " else event[5:]
            name = b""
        else:
            payload, name = _split_fields(event)
            if payload is None:
                return  # comment or keep-alive
        if name == b"error":
            self.error = self.error or _first_line(payload)
            return
        if payload[:1] != b"{":
            if payload.strip() == b"[DONE]":
                self.done = True
            else:
                self.invalid = self.invalid or f"SSE data is not JSON: {_first_line(payload)}"
        elif chat:
            self._json_event(payload, arrival_ns)
        else:
            self._typed_parsed(payload, name.decode("latin-1") or None, arrival_ns)

    def _json_event(self, payload: bytes, arrival_ns: int | None) -> None:
        if _NEEDS_PARSE.search(payload) is not None:
            self._parsed(payload, arrival_ns)
        elif arrival_ns is None:
            return
        elif _ANSWER_TEXT.search(payload) is not None:
            self._stamp(ANSWER, arrival_ns)
        elif _REASONING_TEXT.search(payload) is not None:
            self._stamp(REASONING, arrival_ns)

    def _stamp(self, channel: str, arrival_ns: int) -> None:
        if channel == REASONING:
            self.reasoning_chunks += 1
        elif self.first_answer < 0:
            self.first_answer = len(self.chunk_offsets_ns)
        self.chunk_offsets_ns.append(arrival_ns - self.start_ns)

    def _loads(self, payload: bytes) -> dict | None:
        """The event's JSON object; None (and the stream marked invalid) when it is not one."""
        try:
            obj = orjson.loads(payload)
        except orjson.JSONDecodeError as exc:
            self.invalid = self.invalid or f"SSE data is not valid JSON ({exc})"
            return None
        if not isinstance(obj, dict):
            self.invalid = self.invalid or "SSE data is not a JSON object"
            return None
        return obj

    def _parsed(self, payload: bytes, arrival_ns: int | None) -> None:
        obj = self._loads(payload)
        if obj is None:
            return
        if error_object_kind(obj) is not None:
            self.error = self.error or error_text(obj["error"])
            return
        usage = obj.get("usage")
        if isinstance(usage, dict):
            self.usage = usage
        for choice in array_items(obj.get("choices")):
            if not isinstance(choice, dict):
                continue
            if choice.get("finish_reason"):
                self.finish_reason = str(choice["finish_reason"])
            for call in array_items(choice_delta(choice).get("tool_calls")):
                if isinstance(call, dict):
                    self.tool_call_ids.add((choice.get("index", 0), call.get("index", call.get("id"))))
        channel = event_channel(obj)
        if channel is not None and arrival_ns is not None:
            self._stamp(channel, arrival_ns)


def _string_end(data: bytes, start: int) -> int:
    """Index of the quote that closes the JSON string whose text starts at `start`; -1 if none."""
    quote = data.find(b'"', start)
    while quote > 0:
        backslashes = quote - len(data[:quote].rstrip(b"\\"))
        if backslashes % 2 == 0:
            return quote
        quote = data.find(b'"', quote + 1)
    return -1


def _split_fields(event: bytes) -> tuple[bytes | None, bytes]:
    """Multi-line events: join `data:` lines with newlines, keep the `event:` name."""
    data_lines, name = [], b""
    for line in event.split(b"\n"):
        if line.startswith(b"data:"):
            data_lines.append(line[6:] if line[5:6] == b" " else line[5:])
        elif line.startswith(b"event:"):
            name = line[6:].strip()
    if not data_lines:
        return (b"" if name == b"error" else None), name
    return b"\n".join(data_lines), name


def _first_line(data: bytes) -> str:
    text = data.decode("utf-8", "replace").strip()
    return (text.splitlines() or [""])[0][:200]
