"""The proof: re-read original and anonymized traces and check counts, structure, sharing and leaks,
independent of how the text was generated (it only tokenizes, compares and scans). What is checked
and what a leak is: README, `--verify`. Holds the original's words and span hashes in memory."""

from __future__ import annotations

import hashlib
import re
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from anonymizer.dialect_items import item_text, system_message
from anonymizer.keys import ANY_REKEYED_ID, rekeyed_id_pattern
from anonymizer.nonce import nonce_scope
from anonymizer.pipeline import ID_COLUMNS
from anonymizer.tools_schema import SCHEMA_KEEP, SCHEMA_KEYWORDS, SCHEMA_LIST, SCHEMA_MAP, SCHEMA_ONE
from llmreplay.exact_text import ExactText
from llmreplay.prefix_hash import prefix_block_hashes
from llmreplay.tokenizers import load_tokenizer
from llmreplay.trace_format import CONTENT_COLUMN_NAMES, SHAPE_COLUMN_NAMES
from llmreplay.trace_io import iter_trace_batches, read_meta
from llmreplay.wire.message_text import content_text

SPAN_TOKENS = 5
# A span is a leak when it holds this many tokens with a letter or digit: JSON punctuation around
# one or two generator words (`", "management", "`) recurs by chance, and words have their own check.
MIN_SPAN_WORD_TOKENS = 3
MIN_LEAK_WORD_CHARS = 4
MAX_LISTED_PROBLEMS = 30
_WORD = re.compile(r"\w{4,}")
# Base64 images (PNG, JPEG, GIF, WebP): pictures, not text; an Anthropic image's stand-in is a PNG.
_BASE64_IMAGE = ("iVBORw0KGgo", "/9j/", "R0lGOD", "UklGR")
# A number literal in JSON text (after ':', '[' or ',', before ',', ']' or '}'), escaped or not.
_JSON_NUMBER = re.compile(r"(?<=[:\[,])(\s*)-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?(?=\s*[,\]}])")
_ID_COLUMNS = tuple(ID_COLUMNS)
_ID_FORMS = {name: rekeyed_id_pattern(prefix) for name, (_, prefix) in ID_COLUMNS.items()}
_COMPARED_SHAPE = tuple(n for n in SHAPE_COLUMN_NAMES if n not in _ID_COLUMNS and n != "prefix_block_hashes")
# Words the output holds by design: OpenAI protocol keys and values, schema keywords, media stand-ins.
_PROTOCOL_WORDS = frozenset(
    word.lower()
    for phrase in (
        *SCHEMA_KEYWORDS,
        "system user assistant tool developer function none auto required text image_url input_text output_text",
        "input_image input_audio json_schema json_object object string integer number array boolean null",
        "high data image base64 audio message function_call function_call_output file_id file_data filename",
        "role content name tool_calls tool_call_id call_id type parameters arguments schema strict url detail",
        "format refusal reasoning_content output status index audio",
        # the Responses API's items and the Anthropic Messages API's blocks
        "instructions input input_file summary summary_text reasoning_text encrypted_content item_reference",
        "custom_tool_call custom_tool_call_output tool_use server_tool_use tool_result tool_use_id is_error",
        "thinking signature redacted_thinking input_schema cache_control ephemeral ttl source media_type",
    )
    for word in re.findall(r"\w{4,}", phrase)
)


@dataclass
class VerifyReport:
    rows: int = 0
    texts_checked: int = 0
    count_mismatches: int = 0
    structure_mismatches: int = 0
    shape_mismatches: int = 0
    id_mismatches: int = 0
    blocks_checked: int = 0
    sharing_violations: int = 0
    leaked_words: int = 0
    leaked_spans: int = 0
    kept_numbers: int = 0
    original_spans: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (
            self.count_mismatches
            or self.structure_mismatches
            or self.shape_mismatches
            or self.id_mismatches
            or self.sharing_violations
            or self.leaked_words
            or self.leaked_spans
            or self.kept_numbers
        )

    def problem(self, text: str) -> None:
        if len(self.problems) < MAX_LISTED_PROBLEMS:
            self.problems.append(text)

    def to_json(self) -> dict[str, Any]:
        return {**self.__dict__, "ok": self.ok}

    def summary_lines(self) -> list[str]:
        verdict = "PASSED" if self.ok else "FAILED"
        lines = [
            f"verification {verdict}: {self.rows} rows",
            f"  token counts: {self.texts_checked} texts checked, {self.count_mismatches} differ",
            f"  structure: {self.structure_mismatches} differ; shape columns: {self.shape_mismatches} differ; "
            f"ids: {self.id_mismatches} inconsistent",
            f"  prefix sharing: {self.blocks_checked} blocks checked, {self.sharing_violations} violations",
            f"  leaks: {self.leaked_words} original words, {self.leaked_spans} original {SPAN_TOKENS}-token spans "
            f"found (against {self.original_spans} original spans), "
            f"{self.kept_numbers} tool-call numbers with original digits in place",
        ]
        return lines + [f"  problem: {p}" for p in self.problems]


def _rows(path: Path) -> Iterator[dict[str, Any]]:
    _, batches = iter_trace_batches(path, batch_size=2048)
    for batch in batches:
        yield from batch.to_pylist()


class _Bijection:
    """Checks that a mapping seen pair by pair is one-to-one (equal in <-> equal out)."""

    def __init__(self):
        self.forward: dict = {}
        self.backward: dict = {}

    def check(self, left, right) -> bool:
        if self.forward.setdefault(left, right) != right:
            return False
        return self.backward.setdefault(right, left) == left


def verify_anonymized(original: Path, anonymized: Path, tokenizer_spec: str, mode: str) -> VerifyReport:
    return Verifier(original, anonymized, tokenizer_spec, mode).run()


class Verifier:
    def __init__(self, original: Path, anonymized: Path, tokenizer_spec: str, mode: str):
        self.original, self.anonymized, self.mode = original, anonymized, mode
        self.tokenizer = load_tokenizer(tokenizer_spec)
        self.block_size = read_meta(anonymized).block_size
        self.report = VerifyReport()
        self.exempt = set(_PROTOCOL_WORDS) | {w.strip() for w in ExactText(self.tokenizer).vocabulary}
        self.words: set[str] = set()
        self.span_parts: list[np.ndarray] = []
        self.seen_leaves: set[bytes] = set()
        self.original_id_forms: set[str] = set()  # id-shaped substrings of the original content
        self.names = _Bijection()
        self.ids = {
            "request": _Bijection(),
            "session": _Bijection(),
            "user": _Bijection(),
            "api_key": _Bijection(),
        }
        self.block_map = _Bijection()
        self.content_block_map = _Bijection()
        self._ids_cache: OrderedDict[str, list[int]] = OrderedDict()
        self._wordy_tokens: dict[int, bool] = {}

    def run(self) -> VerifyReport:
        report = self.report
        out_rows = _rows(self.anonymized)
        for index, before in enumerate(_rows(self.original)):
            after = next(out_rows, None)
            if after is None:
                report.shape_mismatches += 1
                report.problem(f"output has only {index} rows")
                break
            self._row(index, before, after)
            report.rows += 1
        if next(out_rows, None) is not None:
            report.shape_mismatches += 1
            report.problem("output has more rows than the original")
        self._scan_output()
        return report

    # -- pass 1: row by row --------------------------------------------------------------------

    def _row(self, index: int, before: dict, after: dict) -> None:
        report = self.report
        for name in _COMPARED_SHAPE:
            if before[name] != after[name]:
                report.shape_mismatches += 1
                report.problem(f"row {index}: column {name} changed")
        for name in _ID_COLUMNS:
            kind = ID_COLUMNS[name][0]
            if (before[name] is None) != (after[name] is None) or before[name] == after[name] is not None:
                report.id_mismatches += 1
                report.problem(f"row {index}: column {name} not re-keyed")
            elif after[name] is not None and not _ID_FORMS[name].fullmatch(after[name]):
                report.id_mismatches += 1
                report.problem(f"row {index}: column {name} is not a bare keyed id")
            elif before[name] is not None and not self.ids[kind].check(before[name], after[name]):
                report.id_mismatches += 1
                report.problem(f"row {index}: column {name} maps inconsistently")
        scope = nonce_scope(self.mode, before["request_id"], before["session_id"]) or b""
        for a, b in zip(before["prefix_block_hashes"], after["prefix_block_hashes"], strict=False):
            report.blocks_checked += 1
            if not self.block_map.check((scope, a), b):
                report.sharing_violations += 1
                report.problem(f"row {index}: prefix_block_hashes sharing differs")
                break
        if all(name in before for name in CONTENT_COLUMN_NAMES):
            self._content(index, before, after, scope)

    def _content(self, index: int, before: dict, after: dict, scope: bytes) -> None:
        where = f"row {index}"
        old_messages, new_messages = _loads(before["content_messages"]), _loads(after["content_messages"])
        old_system, new_system = _loads(before["content_system"]), _loads(after["content_system"])
        self._collect(old_messages)
        self._collect(old_system)
        if (old_system is None) != (new_system is None):
            self._structure(f"{where}: content_system {'appeared' if old_system is None else 'vanished'}")
        if isinstance(old_messages, str) and isinstance(new_messages, str):  # a Responses string input
            old_messages, new_messages = _user(old_messages), _user(new_messages)
        if old_system is not None and new_system is not None:  # first in the prompt, as the dialects count
            old_messages = [system_message(old_system), *(old_messages or [])]
            new_messages = [system_message(new_system), *(new_messages or [])]
        counted = item_text(before["endpoint"])
        if isinstance(old_messages, list) and isinstance(new_messages, list):
            self._messages(where, old_messages, new_messages, scope, counted)
        elif old_messages is not None:
            self._equal_counts(where, "content_messages", _flat_any(old_messages), _flat_any(new_messages))
        old_prompt, new_prompt = _loads(before["content_prompt"]), _loads(after["content_prompt"])
        self._collect(old_prompt)
        if old_prompt is not None:
            self._equal_prompt(where, old_prompt, new_prompt)
        if before["content_response"] is not None:
            self._collect(before["content_response"])
            self._equal_counts(
                where, "content_response", before["content_response"], after["content_response"] or ""
            )
        old_calls, new_calls = _loads(before["content_tool_calls"]), _loads(after["content_tool_calls"])
        self._collect(old_calls)
        if old_calls is not None:
            self._same(
                where,
                "content_tool_calls",
                _value_skeleton(old_calls, self),
                _value_skeleton(new_calls, self),
            )
            for old_call, new_call in zip(_calls_of(old_calls), _calls_of(new_calls), strict=False):
                self._numbers_replaced(f"{where} content_tool_calls", old_call, new_call)
        for name in ("content_tools", "content_response_format"):
            self._document(where, name, before[name], after[name])

    def _messages(self, where: str, old: list, new: list, scope: bytes, counted) -> None:
        if len(old) != len(new):
            self._structure(f"{where}: {len(old)} messages became {len(new)}")
            return
        old_stream, new_stream = [], []
        for i, (a, b) in enumerate(zip(old, new, strict=True)):
            role_a, text_a = counted(a)
            role_b, text_b = counted(b)
            ids_a, ids_b = self._token_ids(text_a), self._token_ids(text_b)
            self.report.texts_checked += 1
            if len(ids_a) != len(ids_b):
                self.report.count_mismatches += 1
                self.report.problem(f"{where} message {i}: {len(ids_a)} tokens became {len(ids_b)}")
            self._same(
                f"{where} message {i}", "message", _message_skeleton(a, self), _message_skeleton(b, self)
            )
            for old_call, new_call in zip(_calls(a), _calls(b), strict=False):
                self._same_name(f"{where} message {i}", old_call, new_call)
                self._numbers_replaced(f"{where} message {i}", old_call, new_call)
            if role_a != role_b:
                self._structure(f"{where} message {i}: role {role_a} became {role_b}")
            old_stream.append((role_a, ids_a))
            new_stream.append((role_b, ids_b))
        self._sharing(where, scope, old_stream, new_stream)

    def _sharing(self, where: str, scope: bytes, old_stream: list, new_stream: list) -> None:
        """Chained block hashes over the role-tagged token streams must correspond one to one."""
        old_blocks = _stream_blocks(old_stream, self.block_size)
        new_blocks = _stream_blocks(new_stream, self.block_size)
        self.report.blocks_checked += len(old_blocks)
        if len(old_blocks) != len(new_blocks):
            self.report.sharing_violations += 1
            self.report.problem(f"{where}: {len(old_blocks)} content blocks became {len(new_blocks)}")
            return
        for k, (a, b) in enumerate(zip(old_blocks, new_blocks, strict=True)):
            if not self.content_block_map.check((scope, a), b):
                self.report.sharing_violations += 1
                self.report.problem(f"{where}: content block {k} shares differently than in the original")
                return

    def _equal_prompt(self, where: str, old: Any, new: Any) -> None:
        if isinstance(old, list) and old and all(isinstance(t, int) for t in old):
            self.report.texts_checked += 1
            if not isinstance(new, list) or len(new) != len(old):
                self.report.count_mismatches += 1
                self.report.problem(f"{where}: prompt token ids changed length")
            return
        self._equal_counts(where, "content_prompt", _flat_any(old), _flat_any(new))

    def _equal_counts(self, where: str, what: str, old: str, new: str) -> None:
        self.report.texts_checked += 1
        a, b = self.tokenizer.count(old), self.tokenizer.count(new)
        if a != b:
            self.report.count_mismatches += 1
            self.report.problem(f"{where}: {what} had {a} tokens, now {b}")

    def _document(self, where: str, name: str, old_text: str | None, new_text: str | None) -> None:
        if old_text is None:
            if new_text is not None:
                self._structure(f"{where}: {name} appeared")
            return
        old, new = _loads(old_text), _loads(new_text)
        self._collect(old)
        if name == "content_tools":
            self._equal_counts(where, name, old_text, new_text or "")
            if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
                for a, b in zip(old, new, strict=True):
                    self._same(where, "tool", _tool_skeleton(a, self), _tool_skeleton(b, self))
                    self._same_name(where, _function(a), _function(b))
            else:
                self._structure(f"{where}: tool definitions changed number")
            return
        old_schema, new_schema = _inner_schema(old), _inner_schema(new)
        if old_schema is not None:
            self._equal_counts(where, "schema", _compact(old_schema), _compact(new_schema))
        self._same(where, name, _format_skeleton(old, self), _format_skeleton(new, self))

    def _same(self, where: str, what: str, a: Any, b: Any) -> None:
        if a != b:
            self._structure(f"{where}: {what} structure differs")

    def _same_name(self, where: str, old: dict | None, new: dict | None) -> None:
        """Tool names map one to one across every definition and call of the trace."""
        if old is None or new is None:
            return
        if not self.names.check(old.get("name"), new.get("name")):
            self._structure(f"{where}: tool name {_masked({str(old.get('name'))})} maps inconsistently")

    def _numbers_replaced(self, where: str, old: dict, new: dict) -> None:
        """Every number of the arguments replaced, digit by digit: the leak scan skips numbers in JSON
        (see _without_json_numbers), so this is what proves they are gone.
        """
        old_args, new_args = (_loads_or_text(c.get("arguments")) for c in (old, new))
        for a, b in zip(_json_numbers(old_args), _json_numbers(new_args), strict=False):
            a_text, b_text = repr(a), repr(b)
            in_place = len(a_text) == len(b_text) and any(
                x == y and x.isdigit() for x, y in zip(a_text, b_text, strict=True)
            )
            if a == b or in_place:
                self.report.kept_numbers += 1
                self.report.problem(f"{where}: a tool-call argument number keeps original digits")

    def _structure(self, text: str) -> None:
        self.report.structure_mismatches += 1
        self.report.problem(text)

    def _token_ids(self, text: str) -> list[int]:
        found = self._ids_cache.get(text)
        if found is None:
            found = self._ids_cache[text] = self.tokenizer.encode(text) if text else []
            if len(self._ids_cache) > 50_000:
                self._ids_cache.popitem(last=False)
        return found

    def _collect(self, value: Any) -> None:
        """Remember the words and 5-token spans of every original string (each distinct string once)."""
        for text in _strings(value):
            if text.startswith("#/"):  # a $ref: the pointer syntax is structure, the names are content
                text = " ".join(text.split("/")[2:])
            digest = hashlib.blake2b(text.encode(), digest_size=16).digest()
            if digest in self.seen_leaves or text.startswith(("data:", *_BASE64_IMAGE)):
                continue
            if text.lower() in _PROTOCOL_WORDS:  # a key or type the output holds by design
                continue
            self.seen_leaves.add(digest)
            self.original_id_forms.update(ANY_REKEYED_ID.findall(text))
            self.words.update(w.lower() for w in _WORD.findall(text))
            spans = _span_hashes(self._token_ids(text))
            if len(spans):
                self.span_parts.append(spans)

    def keep(self, value: str) -> str:
        """A string the anonymizer keeps by design (schema keyword values, roles): exempt its words."""
        self.exempt.update(w.lower() for w in _WORD.findall(value))
        return value

    # -- pass 2: scan the output ---------------------------------------------------------------

    def _wordy_windows(self, ids: list[int]) -> np.ndarray:
        """Per SPAN_TOKENS window of `ids`: does it hold MIN_SPAN_WORD_TOKENS tokens with a letter or digit?"""
        known = self._wordy_tokens
        for token in ids:
            if token not in known:
                known[token] = any(char.isalnum() for char in self.tokenizer.decode([token]))
        wordy = np.fromiter((known[token] for token in ids), dtype=np.int8, count=len(ids))
        windows = np.lib.stride_tricks.sliding_window_view(wordy, SPAN_TOKENS)
        return windows.sum(axis=1) >= MIN_SPAN_WORD_TOKENS

    def _without_keyed_ids(self, text: str) -> str:
        """`text` without the keyed ids the anonymizer made (ids, call ids), before the leak scan.

        Their hex digits can spell a 5-digit run of an original number (a card, a phone) by chance,
        which is no leak; an id-shaped string that occurs in the original content is still scanned.
        """
        if "_" not in text and "-" not in text:
            return text
        return ANY_REKEYED_ID.sub(lambda m: m[0] if m[0] in self.original_id_forms else "", text)

    def _scan_output(self) -> None:
        spans = np.unique(np.concatenate(self.span_parts)) if self.span_parts else np.zeros(0, np.uint64)
        self.report.original_spans = len(spans)
        leaks = self.words - self.exempt
        seen: set[bytes] = set()
        for index, row in enumerate(_rows(self.anonymized)):
            values = [row.get(name) for name in (*CONTENT_COLUMN_NAMES, *_ID_COLUMNS)]
            for text in _strings([_loads_or_text(v) for v in values if v is not None] + values):
                digest = hashlib.blake2b(text.encode(), digest_size=16).digest()
                if digest in seen:
                    continue
                seen.add(digest)
                text = _without_json_numbers(self._without_keyed_ids(text))
                found = {w.lower() for w in _WORD.findall(text)} & leaks
                if found:
                    self.report.leaked_words += len(found)
                    self.report.problem(f"row {index}: original words in output: {_masked(found)}")
                if text.startswith(("data:", _BASE64_IMAGE[0])) or not len(spans):
                    continue
                ids = self.tokenizer.encode(text)
                hits = np.isin(_span_hashes(ids), spans)
                if hits.any():
                    hits &= self._wordy_windows(ids)
                if hits.any():
                    self.report.leaked_spans += int(hits.sum())
                    self.report.problem(
                        f"row {index}: {int(hits.sum())} original {SPAN_TOKENS}-token spans in output"
                    )


def _without_json_numbers(text: str) -> str:
    """JSON text without its number literals, before the leak scan: numbers are keyed digit by digit,
    and random digits next to JSON punctuation match some original span by chance (`": 55.`).
    """
    if text[:1] not in ("{", "[") and '":' not in text:
        return text
    return _JSON_NUMBER.sub("", text)


def _json_numbers(value: Any) -> Iterator[int | float]:
    """The numbers of a JSON value in document order (booleans are not numbers)."""
    if isinstance(value, dict):
        for item in value.values():
            yield from _json_numbers(item)
    elif isinstance(value, list):
        for item in value:
            yield from _json_numbers(item)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        yield value


def _stream_blocks(stream: list[tuple[str, list[int]]], block_size: int) -> list[int]:
    """Chained block hashes of the messages' tokens, each message's role folded into the chain.

    The role is folded into the message's first token (or the next one, for an empty message),
    so token positions stay the recorder's positions and a role change counts where it starts.
    """
    ids: list[int] = []
    pending = 0
    for role, message_ids in stream:
        pending = (
            pending * 1_000_003 + int.from_bytes(hashlib.blake2b(role.encode(), digest_size=4).digest())
        ) & 0xFFFFFFFF
        if message_ids:
            ids.append((message_ids[0] * 1_000_003 + pending) & 0xFFFFFFFF)
            ids.extend(message_ids[1:])
            pending = 0
    return prefix_block_hashes(ids, block_size)


def _span_hashes(ids: list[int]) -> np.ndarray:
    """64-bit hashes of every window of SPAN_TOKENS consecutive token ids."""
    if len(ids) < SPAN_TOKENS:
        return np.zeros(0, np.uint64)
    array = np.asarray(ids, dtype=np.uint64)
    windows = np.lib.stride_tricks.sliding_window_view(array, SPAN_TOKENS)
    primes = np.array([pow(1_000_003, k, 1 << 64) for k in range(SPAN_TOKENS)], dtype=np.uint64)
    with np.errstate(over="ignore"):
        return (windows * primes).sum(axis=1, dtype=np.uint64)


def _strings(value: Any) -> Iterator[str]:
    """Every string in a JSON value, keys included; JSON inside strings (tool arguments) too."""
    if isinstance(value, str):
        yield value
        if value[:1] in ("{", "["):
            parsed = _loads_or_text(value)
            if not isinstance(parsed, str):
                yield from _strings(parsed)
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def _message_skeleton(message: Any, verifier: Verifier) -> Any:
    if not isinstance(message, dict):
        return type(message).__name__
    out = []
    for key, value in message.items():
        if key in ("role", "type", "status"):
            out.append((key, verifier.keep(value) if isinstance(value, str) else value))
        elif key == "content" and isinstance(value, list):
            out.append((key, [_part_skeleton(p, verifier) for p in value]))
        elif key == "tool_calls" and isinstance(value, list):
            out.append((key, [_call_skeleton(c, verifier) for c in value]))
        elif key == "arguments" and isinstance(value, str):
            out.append((key, _value_skeleton(_loads_or_text(value), verifier)))
        else:
            out.append((key, type(value).__name__))
    return sorted(out, key=lambda item: item[0])


def _part_skeleton(part: Any, verifier: Verifier) -> Any:
    if not isinstance(part, dict):
        return type(part).__name__
    kind = part.get("type")
    return ("part", verifier.keep(kind) if isinstance(kind, str) else kind, "text" in part)


def _call_skeleton(call: Any, verifier: Verifier) -> Any:
    if not isinstance(call, dict) or not isinstance(call.get("function"), dict):
        return type(call).__name__
    function = call["function"]
    arguments = function.get("arguments")
    parsed = _loads_or_text(arguments) if isinstance(arguments, str) else arguments
    return ("call", call.get("type"), "name" in function, _value_skeleton(parsed, verifier))


def _value_skeleton(value: Any, verifier: Verifier) -> Any:
    """Shape of any JSON value: keys and strings anonymous, types and lengths kept."""
    if isinstance(value, dict):
        return {"object": [_value_skeleton(v, verifier) for v in value.values()]}
    if isinstance(value, list):
        return [_value_skeleton(v, verifier) for v in value]
    if isinstance(value, bool) or value is None:
        return value
    return type(value).__name__


def _schema_skeleton(schema: Any, verifier: Verifier) -> Any:
    if isinstance(schema, list):
        return [_schema_skeleton(s, verifier) for s in schema]
    if not isinstance(schema, dict):
        return schema if isinstance(schema, bool) else type(schema).__name__
    out = []
    for key, value in schema.items():
        if key in SCHEMA_KEEP:
            out.append((verifier.keep(key), verifier.keep(value) if isinstance(value, str) else value))
        elif key in SCHEMA_ONE:
            out.append((key, _schema_skeleton(value, verifier)))
        elif key in SCHEMA_LIST and isinstance(value, list):
            out.append((key, [_schema_skeleton(v, verifier) for v in value]))
        elif key in SCHEMA_MAP and isinstance(value, dict):
            out.append((key, [_schema_skeleton(v, verifier) for v in value.values()]))
        elif key in SCHEMA_KEYWORDS:
            out.append((key, _value_skeleton(value, verifier)))
        else:
            out.append(("*", _value_skeleton(value, verifier)))
    return out


def _tool_skeleton(tool: Any, verifier: Verifier) -> Any:
    if not isinstance(tool, dict):
        return _value_skeleton(tool, verifier)
    function = tool.get("function") if isinstance(tool.get("function"), dict) else tool
    return (
        verifier.keep(tool.get("type")) if isinstance(tool.get("type"), str) else None,
        "name" in function,
        _schema_skeleton(function.get("parameters"), verifier),
        sorted(function),
    )


def _format_skeleton(value: Any, verifier: Verifier) -> Any:
    if not isinstance(value, dict):
        return _value_skeleton(value, verifier)
    holder = value.get("json_schema", value)
    kind = value.get("type")
    schema = holder.get("schema") if isinstance(holder, dict) else None
    return (verifier.keep(kind) if isinstance(kind, str) else kind, _schema_skeleton(schema, verifier))


def _function(tool: Any) -> dict | None:
    if not isinstance(tool, dict):
        return None
    return tool["function"] if isinstance(tool.get("function"), dict) else tool


def _calls_of(calls: Any) -> list[dict]:
    """The functions of a list of tool calls (a response's content_tool_calls)."""
    if not isinstance(calls, list):
        return []
    return [c["function"] for c in calls if isinstance(c, dict) and isinstance(c.get("function"), dict)]


def _calls(message: Any) -> list[dict]:
    """A message's calls as {name, arguments}: chat tool_calls, a Responses function_call item, or
    Anthropic tool_use blocks (their `input` object as the arguments)."""
    if not isinstance(message, dict):
        return []
    if message.get("type") == "function_call":
        return [message]
    content = message.get("content")
    blocks = [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []
    uses = [
        {"name": b.get("name"), "arguments": b.get("input")} for b in blocks if b.get("type") == "tool_use"
    ]
    calls = message.get("tool_calls") or []
    return uses + [
        c["function"] for c in calls if isinstance(c, dict) and isinstance(c.get("function"), dict)
    ]


def _user(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


def _inner_schema(value: Any) -> Any:
    if not isinstance(value, dict):
        return None
    holder = value.get("json_schema", value)
    return holder.get("schema") if isinstance(holder, dict) else None


def _flat_any(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return "\n".join(value)
    return content_text(value)


def _loads(text: str | None) -> Any:
    return None if text is None else orjson.loads(text)


def _loads_or_text(text: Any) -> Any:
    if not isinstance(text, str):
        return text
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return text


def _compact(value: Any) -> str:
    return orjson.dumps(value).decode()


def _masked(words: set[str]) -> str:
    return ", ".join(sorted(w[:2] + "*" * (len(w) - 2) for w in words)[:5])
