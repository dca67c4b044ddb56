"""The anonymization run: stream a trace in record batches, rewrite content and ids, write atomically.

Memory stays flat: one batch at a time plus byte-bounded caches. Shape columns are copied untouched
except ids and prefix-block hashes, which are re-keyed.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from anonymizer.config import MODES, AnonymizeConfig
from anonymizer.dialect_items import item_text, system_message
from anonymizer.fakes import Fakes
from anonymizer.keys import Rekeyer, generate_key_file, load_key
from anonymizer.nonce import BlockHashRekeyer, nonce_scope, nonce_words
from anonymizer.replace_text import (
    GRANULARITY_TOKENS,
    Miss,
    PromptRewriter,
    PromptState,
    overlay_words,
)
from anonymizer.tools_schema import rewrite_json_text, rewrite_response_format
from llmreplay import __version__
from llmreplay.errors import BadInput
from llmreplay.exact_text import ExactText
from llmreplay.output_paths import cannot_write, check_output_file
from llmreplay.tokenizers import DEFAULT_TOKENIZER, Tokenizer, load_tokenizer
from llmreplay.trace_arrow import trace_schema
from llmreplay.trace_format import CONTENT_COLUMN_NAMES, TraceMeta
from llmreplay.trace_io import TraceWriter, iter_trace_batches, read_meta, trace_files

ID_COLUMNS = {  # column -> (HMAC namespace, prefix of the new id); parents map like requests
    "request_id": ("request", "req_"),
    "parent_request_id": ("request", "req_"),
    "session_id": ("session", "ses_"),
    "user_id": ("user", "usr_"),
    "api_key_hash": ("api_key", "key_"),
}
MAX_LISTED_MISSES = 50
# Output row groups of about this many bytes (in memory) or rows, not one per batch: the Parquet
# writer holds ~40 KiB of metadata per row group until it closes (39 MiB at 1M rows in 1024-row groups).
OUTPUT_ROW_GROUP_BYTES = 64 * 1024 * 1024
OUTPUT_ROW_GROUP_ROWS = 16_384  # shape-only rows are small: bounds the buffer of those


@dataclass
class AnonymizeResult:
    output_path: Path
    tokenizer_id: str
    mode: str
    tokenizer_spec: str | None  # what loaded it (the id of a tokenizer.json is not a path): verify loads it too
    generated_key_file: Path | None = None
    rows: int = 0
    content_rows: int = 0
    prompt_tokens: int = 0
    texts: int = 0  # messages, prompts, responses, tool and schema documents
    texts_exact: int = 0
    misses: list[str] = field(default_factory=list)
    miss_count: int = 0
    messages: int = 0
    messages_generated: int = 0
    dropped_fields: dict[str, int] = field(default_factory=dict)
    nonces_truncated: int = 0
    inexact_identifiers: int = 0
    elapsed_s: float = 0.0
    cpu_s: float = 0.0  # process CPU time of the run (the anonymizer is single-threaded)

    @property
    def exact_rate(self) -> float:
        return self.texts_exact / self.texts if self.texts else 1.0

    def to_json(self) -> dict[str, Any]:
        data = {k: (str(v) if isinstance(v, Path) else v) for k, v in self.__dict__.items()}
        data["exact_rate"] = self.exact_rate
        return data


def resolve_tokenizer(spec: str | None, meta: TraceMeta) -> Tokenizer:
    """--tokenizer, else the tokenizer the trace was counted with, else the project default."""
    if spec is not None:
        return load_tokenizer(spec)
    recorded = meta.tokenizer
    if recorded is None or recorded == DEFAULT_TOKENIZER or recorded.startswith("tiktoken:"):
        return load_tokenizer(recorded)
    raise BadInput(
        f"the trace was counted with tokenizer '{recorded}': pass it with --tokenizer (a file path)"
    )


def anonymize_trace(config: AnonymizeConfig) -> AnonymizeResult:
    """Validate everything, then anonymize; the output appears only when complete."""
    if config.prefix_sharing not in MODES:
        raise BadInput(f"--prefix-sharing {config.prefix_sharing}: use one of {', '.join(MODES)}")
    if config.nonce_tokens < 0:
        raise BadInput(f"--nonce-tokens {config.nonce_tokens}: must be >= 0")
    if config.nonce_tokens == 0 and config.prefix_sharing != "preserve":
        raise BadInput(
            f"--nonce-tokens 0: --prefix-sharing {config.prefix_sharing} needs a nonce of at least 1 token "
            "(without one, equal prompts of different sessions share the engine's prefix cache)"
        )
    out = check_output_file(config.output_path, config.force, "-o")
    files = trace_files(config.input_path)
    if out.exists() and any(f.resolve() == out.resolve() for f in files):
        raise BadInput(f"-o {out}: is the input trace itself")
    metas = [read_meta(f) for f in files]  # every file checked before any is read
    meta = metas[0]
    _check_keep_meta(config.keep_meta, metas)
    with_content = _content_presence(files)
    tokenizer = resolve_tokenizer(config.tokenizer, meta)
    exact = ExactText(tokenizer)
    key, generated = _resolve_key(config.key_file, out)
    fakes = Fakes(tokenizer, exact, Rekeyer(key))
    spec = config.tokenizer if config.tokenizer is not None else meta.tokenizer
    result = AnonymizeResult(out, tokenizer.id, config.prefix_sharing, spec, generated_key_file=generated)
    out_meta = _output_meta(meta, config, tokenizer, exact, with_content)
    started, started_cpu = time.perf_counter(), time.process_time()
    _, batches = iter_trace_batches(config.input_path, batch_size=config.batch_rows)
    row_anonymizer = RowAnonymizer(fakes, config, meta.block_size, result)
    try:
        with TraceWriter(
            out, out_meta, row_group_size=OUTPUT_ROW_GROUP_ROWS, row_group_bytes=OUTPUT_ROW_GROUP_BYTES
        ) as writer:
            for batch in _in_arrival_order(batches, config.input_path):
                writer.write_table(row_anonymizer.table(pa.Table.from_batches([batch]), with_content))
    except OSError as exc:
        raise cannot_write("-o", out, exc) from None
    result.elapsed_s = time.perf_counter() - started
    result.cpu_s = time.process_time() - started_cpu
    stats = row_anonymizer.rewriter.stats
    result.messages, result.messages_generated = stats.messages, stats.messages_generated
    result.dropped_fields = dict(stats.dropped_fields)
    result.inexact_identifiers = fakes.inexact_identifiers
    return result


def _check_keep_meta(keys: tuple[str, ...], metas: list[TraceMeta]) -> None:
    """Refuse a --keep-meta key the trace does not have: a typo would silently keep nothing."""
    present = {"source"} | {k for m in metas for k in m.extra if k != "anonymization"}
    for key in keys:
        if key not in present:
            known = ", ".join(sorted(present))
            raise BadInput(f"--keep-meta {key}: the trace's metadata has no such key (it has: {known})")


def _content_presence(files: list[Path]) -> bool:
    present = {f: all(n in pq.read_schema(f).names for n in CONTENT_COLUMN_NAMES) for f in files}
    if len(set(present.values())) > 1:
        shape_only = next(f for f, has in present.items() if not has)
        raise BadInput(
            f"{shape_only}: has no content columns while other files of the trace do; anonymize them apart"
        )
    return next(iter(present.values()))


def _resolve_key(key_file: Path | None, output: Path) -> tuple[bytes, Path | None]:
    if key_file is not None and key_file.exists():
        return load_key(key_file), None
    path = key_file or Path.cwd() / f"{output.stem}.anonymization.key"
    if key_file is None and path.exists():
        raise BadInput(f"{path}: a key file of that name exists; pass it with --key-file or move it")
    return generate_key_file(path), path


def _output_meta(
    meta: TraceMeta, config: AnonymizeConfig, tokenizer, exact: ExactText, content: bool
) -> TraceMeta:
    kept = {k: v for k, v in meta.extra.items() if k in config.keep_meta and k != "anonymization"}
    kept["anonymization"] = {
        "mode": config.prefix_sharing,
        "tokenizer": tokenizer.id,
        "nonce_tokens": 0 if config.prefix_sharing == "preserve" else config.nonce_tokens,
        "granularity_tokens": GRANULARITY_TOKENS,
        "vocabulary": exact.vocabulary_id,
        "ids": "HMAC-SHA256 under the secret key",
        "prefix_block_hashes": "HMAC-SHA256 of each original hash"
        + ("" if config.prefix_sharing == "preserve" else f" scoped by {config.prefix_sharing}"),
        "source_format_version": meta.format_version,
        "anonymizer_version": __version__,
    }
    return TraceMeta(
        source=meta.source if "source" in config.keep_meta else "anonymized",
        block_size=meta.block_size,
        tokenizer=tokenizer.id,
        content=content,
        anonymized=True,
        time_zone=meta.time_zone,
        clock_domain=meta.clock_domain,
        relative_time=meta.relative_time,
        extra=kept,
    )


def _in_arrival_order(batches: Iterator[pa.RecordBatch], source: Path) -> Iterator[pa.RecordBatch]:
    """Pass batches through, refusing files that overlap in time (the output must stay sorted)."""
    last = None
    for batch in batches:
        if batch.num_rows == 0:
            continue
        arrivals = batch.column("arrival_time")
        if last is not None and arrivals[0].value < last:
            raise BadInput(f"{source}: its files overlap in time; anonymize them one by one")
        last = arrivals[batch.num_rows - 1].value
        yield batch


class RowAnonymizer:
    """Rewrites one table of rows; keeps the caches that make repeated history cheap."""

    def __init__(self, fakes: Fakes, config: AnonymizeConfig, block_size: int, result: AnonymizeResult):
        self.fakes, self.config, self.result = fakes, config, result
        self.rewriter = PromptRewriter(fakes, block_size, config.cache_bytes, config.check_counts)
        self.block_hashes = BlockHashRekeyer(fakes)
        self._documents: dict[tuple[str, str], tuple[str, bool]] = {}

    def table(self, table: pa.Table, with_content: bool) -> pa.Table:
        columns = {name: table.column(name).to_pylist() for name in ID_COLUMNS}
        hashes = table.column("prefix_block_hashes").to_pylist()
        prompt_tokens = table.column("prompt_tokens").to_pylist()
        scopes = [
            nonce_scope(self.config.prefix_sharing, r, s)
            for r, s in zip(columns["request_id"], columns["session_id"], strict=True)
        ]
        if with_content:
            content = {name: table.column(name).to_pylist() for name in CONTENT_COLUMN_NAMES}
            endpoints = table.column("endpoint").to_pylist()
            new_content = self._content(content, scopes, endpoints)
            for name, values in new_content.items():
                table = table.set_column(
                    table.schema.get_field_index(name), name, pa.array(values, pa.string())
                )
        rekey = self.fakes.rekeyer.id
        for name, (kind, prefix) in ID_COLUMNS.items():
            new = [rekey(kind, value, prefix) for value in columns[name]]
            table = table.set_column(table.schema.get_field_index(name), name, pa.array(new, pa.string()))
        new_hashes = [self.block_hashes.rekey(h, s) for h, s in zip(hashes, scopes, strict=True)]
        index = table.schema.get_field_index("prefix_block_hashes")
        table = table.set_column(index, "prefix_block_hashes", pa.array(new_hashes, pa.list_(pa.int64())))
        self.result.rows += table.num_rows
        self.result.prompt_tokens += sum(prompt_tokens)
        return table.select(trace_schema(with_content).names)

    def _content(self, content: dict[str, list], scopes: list, endpoints: list) -> dict[str, list]:
        rows = len(endpoints)
        out = {name: [None] * rows for name in CONTENT_COLUMN_NAMES}
        for i in range(rows):
            row = {name: content[name][i] for name in CONTENT_COLUMN_NAMES}
            if any(v is not None for v in row.values()):
                self.result.content_rows += 1
            where = f"{self.config.input_path}: row {self.result.rows + i}"
            for name, value in self._row(row, scopes[i], where, endpoints[i]).items():
                out[name][i] = value
        return out

    def _row(
        self, row: dict[str, str | None], scope: bytes | None, where: str, endpoint: str
    ) -> dict[str, str | None]:
        rewriter = self.rewriter
        out: dict[str, str | None] = {}
        words = nonce_words(self.fakes, scope, self.config.nonce_tokens) if scope is not None else []
        state = None
        counted = item_text(endpoint)
        system = _json(row["content_system"], where, "content_system")
        head = [system_message(system)] if system is not None else []  # first in the prompt
        messages = _json(row["content_messages"], where, "content_messages")
        if isinstance(messages, str):  # a Responses API `input` given as one string: one user message
            messages, single = [{"role": "user", "content": messages}], True
        else:
            single = False
        if isinstance(messages, list) or head:
            items = head + (messages if isinstance(messages, list) else [])
            new, state, misses = rewriter.chat(items, PromptState(), counted)
            self._count(len(items), misses, where)
            new, placed = overlay_words(new, words) if words else (new, 0)
            self.result.nonces_truncated += placed < len(words)
            if head:
                out["content_system"] = _dumps(new[0]["content"])
                new = new[1:]
            if isinstance(messages, list):
                out["content_messages"] = _dumps(new[0]["content"] if single else new)
        if messages is not None and not isinstance(messages, list):
            raise BadInput(
                f"{where}: content_messages is a JSON {type(messages).__name__}, expected an array"
            )
        prompt = _json(row["content_prompt"], where, "content_prompt")
        if prompt is not None:
            new, misses = rewriter.prompt(prompt)
            self._count(1, misses, where)
            if words and isinstance(new, str | list):
                new = overlay_words([new] if isinstance(new, str) else new, words)[0]
                new = new[0] if isinstance(prompt, str) else new
            out["content_prompt"] = _dumps(new)
        self._response(row, state, where, out)
        for name, kind in (("content_tools", "tools"), ("content_response_format", "response_format")):
            if row[name] is not None:
                out[name] = self._document(row[name], kind, where)
        return out

    def _response(self, row: dict, state, where: str, out: dict) -> None:
        text, calls_json = row["content_response"], row["content_tool_calls"]
        if text is None and calls_json is None:
            return
        calls = _json(calls_json, where, "content_tool_calls")
        if calls is not None and not isinstance(calls, list):
            raise BadInput(f"{where}: content_tool_calls is a JSON {type(calls).__name__}, expected an array")
        new_text, new_calls, misses = self.rewriter.response(state or PromptState(), text, calls)
        self._count(1, misses, where)
        out["content_response"] = new_text if text is not None else None
        out["content_tool_calls"] = _dumps(new_calls) if calls is not None else None

    def _document(self, text: str, kind: str, where: str) -> str:
        key = (kind, text)
        found = self._documents.get(key)
        if found is None:
            if kind == "tools":
                found = rewrite_json_text(self.fakes, text, "tools")
            else:
                found = rewrite_response_format(self.fakes, text)
            if len(self._documents) > 10_000:
                self._documents.clear()  # bounded; tool sets are few, so this rarely happens
            self._documents[key] = found
        new, exact = found
        self._count(1, [] if exact else [Miss(kind, self.fakes.count(text), self.fakes.count(new))], where)
        return new

    def _count(self, texts: int, misses: list[Miss], where: str) -> None:
        self.result.texts += texts
        self.result.texts_exact += texts - len(misses)
        self.result.miss_count += len(misses)
        for miss in misses:
            if len(self.result.misses) < MAX_LISTED_MISSES:
                self.result.misses.append(
                    f"{where} {miss.where}: {miss.expected_tokens} tokens became {miss.actual_tokens}"
                )


def _json(text: str | None, where: str, column: str) -> Any:
    if text is None:
        return None
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise BadInput(f"{where}: {column} is not valid JSON ({exc})") from None


def _dumps(value: Any) -> str:
    return orjson.dumps(value).decode()
