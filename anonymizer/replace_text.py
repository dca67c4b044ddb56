"""Keyed, prefix-preserving replacement of chat messages, completions prompts and responses: a chunk's
words (chunks end every GRANULARITY_TOKENS, a divisor of the block size, and at message ends) are a
keyed function of every original token and role before its end; counts as wire.message_text."""

from __future__ import annotations

import hashlib
import math
import struct
from array import array
from collections import Counter, OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from anonymizer.config import DEFAULT_CACHE_BYTES
from anonymizer.fakes import Fakes
from anonymizer.media import png_data_url, silent_wav_base64
from anonymizer.tools_schema import JsonTemplate, Slot, fit_value, json_text_template
from llmreplay.wire.channels import REASONING, text_keys
from llmreplay.wire.message_text import message_text

GRANULARITY_TOKENS = 16  # at most 32: one 64-byte digest draws a whole chunk
_UNPACK_INDICES = struct.Struct("<32H").unpack
ROOT_DIGEST = bytes(16)
_DETAILS = ("auto", "low", "high")
# message text that the prompt's count leaves out, replaced all the same: a refusal, reasoning by any name
_UNCOUNTED_TEXT = ("refusal", *text_keys(REASONING))
ItemText = Callable[[Any], tuple[str, str]]  # an item's (role, counted text): anonymizer.dialect_items
_OPAQUE_KEYS = ("signature", "data", "encrypted_content")  # encrypted blobs: same-length stand-ins
_CACHE_CONTROL_KEYS = ("type", "ttl")  # Anthropic prompt-cache markers: protocol, kept


def _plain_field(message: dict) -> str | None:
    """The one string field that is the whole message text, if there is one (the common case)."""
    kind = message.get("type")
    if kind == "function_call":
        return None
    if kind == "function_call_output":
        return "output" if isinstance(message.get("output"), str) else None
    if not isinstance(message.get("content"), str):
        return None
    calls = message.get("tool_calls") or ()
    if any(isinstance(c, dict) and isinstance(c.get("function"), dict) for c in calls):
        return None
    return "content"


@dataclass(frozen=True, slots=True)
class PromptState:
    """Where a prompt ends: the chained digest of its (role, text) sequence and its token count."""

    digest: bytes = ROOT_DIGEST
    offset_tokens: int = 0


@dataclass(frozen=True, slots=True)
class Miss:
    """A replaced text whose token count differs from the original's."""

    where: str
    expected_tokens: int
    actual_tokens: int


@dataclass
class RewriteStats:
    messages: int = 0
    messages_generated: int = 0  # not served from the cache
    messages_exact: int = 0
    dropped_fields: Counter = field(default_factory=Counter)


class PromptRewriter:
    """Replaces the text of prompts and responses; holds a byte-bounded cache of rewritten messages,
    so a conversation's history (repeated in every later turn) is rewritten once.
    """

    def __init__(
        self, fakes: Fakes, block_size: int, cache_bytes: int = DEFAULT_CACHE_BYTES, check_counts=True
    ):
        self.fakes = fakes
        self.granularity = math.gcd(block_size, GRANULARITY_TOKENS)
        self.check_counts = check_counts
        self.stats = RewriteStats()
        self._cache: OrderedDict[bytes, tuple[tuple[Any, int, int], int]] = OrderedDict()
        self._cache_bytes = 0
        self._cache_limit = cache_bytes

    # -- chat messages -------------------------------------------------------------------------

    def chat(
        self, messages: list, state: PromptState = PromptState(), item_text: ItemText = message_text
    ) -> tuple[list, PromptState, list[Miss]]:
        """Rewrite a message (or item) list whose items count by `item_text`; returns (new messages,
        state after them, token-count misses)."""
        out, misses = [], []
        for index, message in enumerate(messages):
            new, expected, actual, state = self.message(message, state, item_text)
            out.append(new)
            if expected != actual:
                misses.append(Miss(f"message {index}", expected, actual))
        return out, state, misses

    def message(
        self, message: Any, state: PromptState, item_text: ItemText = message_text
    ) -> tuple[Any, int, int, PromptState]:
        """One message in its context: (new message, original tokens, new tokens, next state)."""
        self.stats.messages += 1
        role, flat = item_text(message)
        next_digest = hashlib.blake2b(
            state.digest + role.encode() + b"\0" + flat.encode(), digest_size=16
        ).digest()
        canonical = orjson.dumps(message, option=orjson.OPT_SORT_KEYS)
        # the same JSON counts differently in another dialect
        rule = f"{item_text.__module__}.{item_text.__qualname__}".encode()
        cache_key = hashlib.blake2b(state.digest + rule + canonical, digest_size=16).digest()
        entry = self._cache.get(cache_key)
        if entry is None:
            generated = self._generate(message, role, flat, state, item_text)
            self._remember(cache_key, generated, 2 * len(canonical) + 200)
        else:
            generated = entry[0]
            self._cache.move_to_end(cache_key)
        new, expected, actual = generated
        if expected == actual:
            self.stats.messages_exact += 1
        return new, expected, actual, PromptState(next_digest, state.offset_tokens + expected)

    def _remember(self, key: bytes, value: tuple[Any, int, int], cost_bytes: int) -> None:
        """Keep a rewritten message; the cost is a rough size estimate (original JSON, twice)."""
        self._cache[key] = (value, cost_bytes)
        self._cache_bytes += cost_bytes
        while self._cache_bytes > self._cache_limit and len(self._cache) > 1:
            _, (_, old_cost) = self._cache.popitem(last=False)
            self._cache_bytes -= old_cost

    def _generate(
        self, message: Any, role: str, flat: str, state: PromptState, item_text: ItemText
    ) -> tuple[Any, int, int]:
        self.stats.messages_generated += 1
        ids = self.fakes.tokenizer.encode(flat) if flat else []
        seed = self.fakes.rekeyer.seed("message", state.digest + role.encode())
        if not isinstance(message, dict):
            new = self.fakes.text_for(message) if isinstance(message, str) else message
            return new, len(ids), len(ids)
        plain = _plain_field(message)
        if plain is not None:
            text = self.chunked(ids, seed, state.offset_tokens)
            actual = self.fakes.count(text) if self.check_counts else len(ids)
            return self._other_fields(message, {plain: text}), len(ids), actual
        words = self._content_words(_counted_parts(message), flat, ids, seed, state.offset_tokens)
        # Other leaves are filled from a seed of the whole message text, so different messages differ.
        seed = self.fakes.rekeyer.seed("message-parts", seed + flat.encode())
        template = JsonTemplate(self.fakes)
        value = self._template(template, message, seed, words)
        new, _, actual = fit_value(template, value, lambda m: item_text(m)[1], len(ids))
        return new, len(ids), actual

    def _content_words(
        self, texts: list[str], flat: str, ids: list[int], seed: bytes, offset_tokens: int
    ) -> list[list[str]]:
        """Words for each text part, taken from the message's chunked stream at that part's token
        positions, so text parts share prefixes exactly as plain string content does.

        The first token of every later part is the newline that joins it to the one before.
        """
        if not texts:
            return []
        words = self.chunked_words(ids, seed, offset_tokens)
        out, start, joined = [], 0, ""
        for index, text in enumerate(texts):
            joined = text if index == 0 else f"{joined}\n{text}"
            end = len(ids) if joined == flat else self.fakes.count(joined)
            out.append(words[start + (index > 0) : end])
            start = max(start, end)
        return out

    def chunked(self, ids: list[int], seed: bytes, offset_tokens: int) -> str:
        return "".join(self.chunked_words(ids, seed, offset_tokens))

    def chunked_words(self, ids: list[int], seed: bytes, offset_tokens: int) -> list[str]:
        """Words for `ids`: one chunk per granularity-aligned run, drawn from the chain up to its end.

        Each chunk's 64-byte chained digest holds 32 word indices, enough for a chunk (at most 16
        tokens), so a chunk costs one hash: this loop is the anonymizer's hot path.
        """
        vocabulary = self.fakes.exact.vocabulary
        mask = len(vocabulary) - 1
        blake2b, unpack = hashlib.blake2b, _UNPACK_INDICES
        g, n, start = self.granularity, len(ids), 0
        words: list[str] = []
        while start < n:
            end = min(n, start + g - (offset_tokens + start) % g)
            seed = blake2b(seed[:16] + array("I", ids[start:end]).tobytes(), digest_size=64).digest()
            words.extend([vocabulary[i & mask] for i in unpack(seed)[: end - start]])
            start = end
        return words

    def _other_fields(self, message: dict, done: dict) -> dict:
        """The message with its text fields from `done` and every other field made anonymous."""
        template = JsonTemplate(self.fakes)
        out = {}
        for key, value in message.items():
            out[key] = done[key] if key in done else self._field(template, key, value, b"")
            if out[key] is _DROP:
                del out[key]
        return template.fill(out)

    def _template(self, template: JsonTemplate, message: dict, seed: bytes, words: list) -> dict:
        split = {"content": words}
        if message.get("type") == "reasoning":  # a Responses reasoning item: its summary counts first
            summary = len(_text_parts(message.get("summary")))
            split = {"summary": words[:summary], "content": words[summary:]}
        out = {}
        for key, value in message.items():
            new = self._field(template, key, value, seed, split.get(key, ()))
            if new is not _DROP:
                out[key] = new
        return out

    def _field(self, template: JsonTemplate, key: str, value: Any, seed: bytes, words: Sequence = ()) -> Any:
        fakes = self.fakes
        if key in ("role", "type", "status", "index"):
            return value
        if key == "content":
            return self._content(template, value, seed, words)
        if key == "output" and isinstance(value, str):
            return template.slot(_sub_seed(seed, 0), fakes.count(value))
        if key == "output" and isinstance(value, list):  # a function_call_output given as parts
            return self._content(template, value, _sub_seed(seed, 1), ())
        if key == "summary" and isinstance(value, list):  # a Responses reasoning item's summary parts
            return self._content(template, value, _sub_seed(seed, 2), words)
        if key == "input" and isinstance(value, str):  # a Responses custom_tool_call's input
            return template.slot(_sub_seed(seed, 3), fakes.count(value))
        if key in _OPAQUE_KEYS and isinstance(value, str):
            return fakes.opaque(value)
        if key == "tool_calls" and isinstance(value, list):
            return [self._call(template, call) for call in value]
        if key == "function_call" and isinstance(value, dict):
            return self._function(template, value)
        if key in ("tool_call_id", "call_id") and isinstance(value, str):
            return fakes.rekeyer.id("call", value, "call_")
        if key == "id" and isinstance(value, str):
            return fakes.rekeyer.id("item", value, "id_")
        if key == "name" and isinstance(value, str):
            return fakes.identifier(value)
        if key == "arguments" and isinstance(value, str):
            return json_text_template(template, value)
        if key in _UNCOUNTED_TEXT and isinstance(value, str):
            return fakes.text_for(value)
        if key == "audio" and isinstance(value, dict) and isinstance(value.get("id"), str):
            return {"id": fakes.rekeyer.id("audio", value["id"], "audio_")}
        if value is None and key in _UNCOUNTED_TEXT + ("name", "tool_calls", "function_call", "audio"):
            return None
        self.stats.dropped_fields[f"message.{key}"] += 1
        return _DROP

    def _content(self, template: JsonTemplate, content: Any, seed: bytes, words: Sequence) -> Any:
        """Content with each text (in text_parts order) filled from its words in `words`."""
        given = iter(words)
        if isinstance(content, str):
            return self._text_slot(template, _sub_seed(seed, 0), content, next(given, None))
        if isinstance(content, list):
            out = []
            for index, part in enumerate(content):
                if isinstance(part, str):
                    out.append(self._text_slot(template, _sub_seed(seed, index), part, next(given, None)))
                elif isinstance(part, dict):
                    text_words = next(given, None) if _part_text(part) is not None else None
                    out.append(self._part(template, part, _sub_seed(seed, index), text_words))
                else:
                    out.append(part)
            return out
        return template.value(content)

    def _text_slot(self, template: JsonTemplate, seed: bytes, text: str, words: list | None) -> Slot:
        if words is None:
            return template.slot(seed, self.fakes.count(text))
        return template.slot(seed, len(words), words)

    def _part(self, template: JsonTemplate, part: dict, seed: bytes, words: list | None) -> dict:
        """A content part: text replaced, images and audio by stand-ins, type and count kept."""
        fakes = self.fakes
        out: dict[str, Any] = {}
        for key, value in part.items():
            if key == "type" or (key == "detail" and value in _DETAILS):
                out[key] = value
            elif key in ("text", "thinking") and isinstance(value, str):  # thinking: an Anthropic block's
                out[key] = self._text_slot(template, seed, value, words)
            elif key == "content" and isinstance(value, str):  # a tool_result's
                out[key] = self._text_slot(template, _sub_seed(seed, 6), value, words)
            elif key == "image_url" and isinstance(value, dict):
                url = value.get("url") if isinstance(value.get("url"), str) else ""
                image = {"url": self._image(url)}
                if value.get("detail") in _DETAILS:
                    image["detail"] = value["detail"]
                out[key] = image
            elif key == "image_url" and isinstance(value, str):
                out[key] = self._image(value)
            elif key == "input_audio" and isinstance(value, dict):
                out[key] = {"data": silent_wav_base64(), "format": "wav"}
            elif key == "file_id" and isinstance(value, str):
                out[key] = fakes.rekeyer.id("file", value, "file-")
            elif key in _BLOCK_FIELDS:
                new = _BLOCK_FIELDS[key](self, template, value, seed)
                if new is _DROP:
                    self.stats.dropped_fields[f"part.{key}"] += 1
                else:
                    out[key] = new
            else:
                self.stats.dropped_fields[f"part.{key}"] += 1
        return out

    # -- Anthropic content blocks (tool_use, tool_result, thinking, redacted_thinking, image) ------

    def _block_id(self, template: JsonTemplate, value: Any, seed: bytes) -> Any:
        """tool_use `id` and tool_result `tool_use_id`: one mapping, so a result keeps its call."""
        return self.fakes.rekeyer.id("call", value, "toolu_") if isinstance(value, str) else _DROP

    def _block_name(self, template: JsonTemplate, value: Any, seed: bytes) -> Any:
        return self.fakes.identifier(value) if isinstance(value, str) else _DROP

    def _block_input(self, template: JsonTemplate, value: Any, seed: bytes) -> Any:
        """A tool_use input: an object rewritten as chat's tool-call arguments are."""
        if isinstance(value, str):
            return template.slot(_sub_seed(seed, 5), self.fakes.count(value))
        return template.value(value)

    def _block_content(self, template: JsonTemplate, value: Any, seed: bytes) -> Any:
        """A tool_result's content given as blocks of its own (a string one is drawn with the text parts)."""
        if isinstance(value, list):
            return [
                self._part(template, part, _sub_seed(seed, 100 + i), None)
                if isinstance(part, dict)
                else template.value(part)
                for i, part in enumerate(value)
            ]
        return _DROP

    def _block_opaque(self, template: JsonTemplate, value: Any, seed: bytes) -> Any:
        return self.fakes.opaque(value) if isinstance(value, str) else _DROP

    def _block_source(self, template: JsonTemplate, value: Any, seed: bytes) -> Any:
        """An image's source: a 1x1 PNG stand-in, keyed by the original (equal images stay equal)."""
        if not isinstance(value, dict):
            return _DROP
        original = orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
        url = png_data_url(self.fakes.rekeyer.seed("image", original)[:3])
        return {"type": "base64", "media_type": "image/png", "data": url.split(",", 1)[1]}

    def _block_kept(self, template: JsonTemplate, value: Any, seed: bytes) -> Any:
        if isinstance(value, bool):  # is_error
            return value
        if isinstance(value, dict) and all(isinstance(value.get(k, ""), str) for k in _CACHE_CONTROL_KEYS):
            return {k: value[k] for k in _CACHE_CONTROL_KEYS if k in value}
        return _DROP

    def _image(self, url: str) -> str:
        return png_data_url(self.fakes.rekeyer.seed("image", url.encode())[:3])

    def _call(self, template: JsonTemplate, call: Any) -> Any:
        if not isinstance(call, dict):
            return template.value(call)
        out: dict[str, Any] = {}
        for key, value in call.items():
            if key in ("type", "index"):
                out[key] = value
            elif key == "id" and isinstance(value, str):
                out[key] = self.fakes.rekeyer.id("call", value, "call_")
            elif key == "function" and isinstance(value, dict):
                out[key] = self._function(template, value)
            else:
                self.stats.dropped_fields[f"tool_call.{key}"] += 1
        return out

    def _function(self, template: JsonTemplate, function: dict) -> dict:
        out: dict[str, Any] = {}
        for key, value in function.items():
            if key == "name" and isinstance(value, str):
                out[key] = self.fakes.identifier(value)
            elif key == "arguments" and isinstance(value, str):
                out[key] = json_text_template(template, value)
            else:
                out[key] = template.value(value)
        return out

    # -- responses and completions prompts ------------------------------------------------------

    def response(
        self, state: PromptState, text: str | None, tool_calls: list | None
    ) -> tuple[Any, Any, list[Miss]]:
        """The answer rewritten as the assistant message that follows the prompt, so it equals its
        copy in the next turn's history. Returns (new text, new tool calls, misses).
        """
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if tool_calls:
            message["tool_calls"] = tool_calls
        new, expected, actual, _ = self.message(message, state)
        misses = [Miss("response", expected, actual)] if expected != actual else []
        return new.get("content"), new.get("tool_calls") if tool_calls is not None else None, misses

    def prompt(self, prompt: Any) -> tuple[Any, list[Miss]]:
        """A completions/embeddings prompt: text, a batch of texts, token ids or batches of ids."""
        if isinstance(prompt, str):
            new, expected, actual, _ = self.message({"role": "prompt", "content": prompt}, PromptState())
            return new["content"], [Miss("prompt", expected, actual)] if expected != actual else []
        if isinstance(prompt, list) and all(isinstance(p, str) for p in prompt):
            state, out, misses = PromptState(), [], []
            for index, item in enumerate(prompt):
                new, expected, actual, state = self.message({"role": "prompt", "content": item}, state)
                out.append(new["content"])
                if expected != actual:
                    misses.append(Miss(f"prompt item {index}", expected, actual))
            return out, misses
        if isinstance(prompt, list) and all(isinstance(p, int) and not isinstance(p, bool) for p in prompt):
            return self._ids(prompt), []
        if isinstance(prompt, list) and all(isinstance(p, list) for p in prompt):
            return [
                self._ids(p) if all(isinstance(t, int) for t in p) else self.prompt(p)[0] for p in prompt
            ], []
        template = JsonTemplate(self.fakes)
        return template.fill(template.value(prompt)), []

    def _ids(self, ids: list[int]) -> list[int]:
        """Token ids of the same length, from the vocabulary words, keyed by the whole id sequence."""
        seed = self.fakes.rekeyer.seed("token-ids", array("q", ids).tobytes())
        return self.fakes.exact.token_ids(len(ids), seed)


def overlay_words(texts_owner: list, nonce_words: list[str]) -> tuple[list, int]:
    """Put `nonce_words` over the first words of a rewritten prompt (messages or prompt strings).

    Each word is one token, so no count changes; returns (new list, words placed). Copy-on-write:
    cached messages are never modified.
    """
    remaining = list(nonce_words)
    out = []
    for item in texts_owner:
        if remaining:
            item = _overlay_item(item, remaining)
        out.append(item)
    return out, len(nonce_words) - len(remaining)


def _overlay_item(item: Any, remaining: list[str]) -> Any:
    if isinstance(item, str):
        return _overlay_text(item, remaining)
    if not isinstance(item, dict):
        return item
    item = dict(item)
    for key in ("content", "output"):
        value = item.get(key)
        if isinstance(value, str):
            item[key] = _overlay_text(value, remaining)
        elif isinstance(value, list) and key == "content":
            parts = []
            for part in value:
                if remaining and isinstance(part, dict) and isinstance(part.get("text"), str):
                    part = {**part, "text": _overlay_text(part["text"], remaining)}
                elif remaining and isinstance(part, str):
                    part = _overlay_text(part, remaining)
                parts.append(part)
            item[key] = parts
    return item


def _overlay_text(text: str, remaining: list[str]) -> str:
    words = text.split(" ")[1:]  # generated text is " w1 w2 ...": one leading space per word
    take = min(len(words), len(remaining))
    if take == 0:
        return text
    placed = [remaining.pop(0).lstrip(" ") for _ in range(take)]
    return " " + " ".join(placed + words[take:])


_BLOCK_FIELDS = {
    "id": PromptRewriter._block_id,
    "tool_use_id": PromptRewriter._block_id,
    "name": PromptRewriter._block_name,
    "input": PromptRewriter._block_input,
    "content": PromptRewriter._block_content,
    "signature": PromptRewriter._block_opaque,
    "data": PromptRewriter._block_opaque,
    "source": PromptRewriter._block_source,
    "is_error": PromptRewriter._block_kept,
    "cache_control": PromptRewriter._block_kept,
}


def _part_text(part: dict) -> str | None:
    """A content part's counted text drawn from the message's word stream: a text part's (chat,
    Responses, Anthropic), a thinking block's, a tool_result's given as a string."""
    for key in ("text", "thinking"):
        if isinstance(part.get(key), str):
            return part[key]
    if part.get("type") == "tool_result" and isinstance(part.get("content"), str):
        return part["content"]
    return None


def _text_parts(content: Any) -> list[str]:
    """The counted texts of a content value in order (text_parts, with thinking blocks)."""
    if isinstance(content, str):
        return [content]
    if not isinstance(content, list):
        return []
    found = (p if isinstance(p, str) else _part_text(p) if isinstance(p, dict) else None for p in content)
    return [text for text in found if text is not None]


def _counted_parts(message: dict) -> list[str]:
    """The texts a message's words are drawn for, in prompt order: a reasoning item's summary, then content."""
    texts = _text_parts(message.get("content"))
    return _text_parts(message.get("summary")) + texts if message.get("type") == "reasoning" else texts


def _sub_seed(seed: bytes, index: int) -> bytes:
    return hashlib.blake2b(seed + index.to_bytes(4, "little"), digest_size=16).digest()


class _Drop:
    def __repr__(self) -> str:
        return "<drop>"


_DROP = _Drop()
