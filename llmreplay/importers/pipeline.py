"""`llmreplay import`: read a public trace, assemble trace records, write one shape trace atomically."""

from __future__ import annotations

from dataclasses import dataclass

from llmreplay.errors import BadInput
from llmreplay.importers import BY_NAME
from llmreplay.importers.assemble import IMPORTED_ENDPOINT, IMPORTED_STREAM, assemble
from llmreplay.importers.config import ImportConfig
from llmreplay.importers.source_request import SourceRequest, skip_counts, skip_summary
from llmreplay.output_paths import cannot_write, check_output_file
from llmreplay.trace_format import TraceMeta
from llmreplay.trace_io import write_trace


@dataclass(frozen=True, slots=True)
class ImportSummary:
    rows_read: int
    requests: int
    sessions: int
    skipped_line: str | None  # one line for stderr, None when nothing was skipped
    reordered_rows: int
    meta: TraceMeta


def check_config(config: ImportConfig) -> None:
    if config.source not in BY_NAME:
        raise BadInput(f"import: unknown source {config.source!r} (one of {', '.join(BY_NAME)})")
    if config.block_size is not None:
        if config.block_size <= 0:
            raise BadInput(f"--block-size {config.block_size}: must be a positive number of tokens")
        if not BY_NAME[config.source].block_ids:
            raise BadInput(f"--block-size: {config.source} traces carry no prefix hash ids")
    if config.input_path.is_dir() and not BY_NAME[config.source].directories:
        raise BadInput(f"{config.input_path}: is a directory; import {config.source} reads one file")
    check_output_file(config.output_path, config.force, "-o")


def sharing_note(has_hashes: bool, block_size: int) -> str:
    """What the imported prefix sharing is worth to a replay (said in the summary and the metadata)."""
    if not has_hashes:
        return "absent (the source has none): replayed prompts share no prefix"
    return (
        f"block-accurate only: sharing known to whole {block_size}-token blocks of the source's tokenizer, "
        f"so a replay reproduces each shared prefix to within {block_size} tokens"
    )


def _assumed(requests: list[SourceRequest]) -> dict:
    """What the trace assumes where the source does not say (said only when some row needed it)."""
    assumed = {}
    if any(r.endpoint is None for r in requests):
        assumed["endpoint_assumed"] = IMPORTED_ENDPOINT
    if any(r.stream is None for r in requests):
        assumed["stream_assumed"] = IMPORTED_STREAM
    return assumed


def import_trace_file(config: ImportConfig) -> ImportSummary:
    check_config(config)
    importer = BY_NAME[config.source]
    read = importer.read(config.input_path, config.block_size)
    rows_read = len(read.requests) + sum(len(lines) for lines in read.skipped.values())
    assembly = assemble(read.requests, config.source, read.skipped)
    skipped_line = skip_summary(read.skipped, rows_read, importer.unit)
    if not assembly.records:
        raise BadInput(f"{config.input_path}: no importable {importer.unit} ({skipped_line})")
    extra = {
        "importer": config.source,
        "source_rows": rows_read,
        **_assumed(read.requests),
        "prompt_tokens": "whole prompt as the source counts it, conversation history included",
        "prefix_hashes": sharing_note(read.has_prefix_hashes, read.block_size),
        "skipped": skip_counts(read.skipped),
        "reordered_rows": assembly.reordered_rows,
        "think_times_clamped_to_0": assembly.clamped_think_times,
        **read.extra,
    }
    meta = TraceMeta(
        source=f"import:{config.source}:{config.input_path.name}",
        block_size=read.block_size,
        tokenizer=None,
        clock_domain="source",
        relative_time=read.relative_time,
        extra=extra,
    )
    try:
        write_trace(config.output_path, assembly.records, meta)
    except OSError as exc:
        raise cannot_write("-o", config.output_path, exc) from None
    return ImportSummary(
        rows_read=rows_read,
        requests=len(assembly.records),
        sessions=assembly.sessions,
        skipped_line=skipped_line,
        reordered_rows=assembly.reordered_rows,
        meta=meta,
    )
