"""Mooncake jsonl (FAST'25 traces) and AIPerf's extension of it (session_id, delay).

Each line: timestamp (ms from an unknown origin), input_length, output_length, hash_ids (ids of
512-token prefix blocks). The ids are kept as they are, so an export gives them back unchanged.
"""

from __future__ import annotations

from pathlib import Path

from llmreplay.errors import BadInput
from llmreplay.importers.source_files import count_field, is_blank, iter_jsonl, number_field
from llmreplay.importers.source_request import (
    HASH_ID_ORIGIN_KEY,
    SKIP_FAILED,
    SKIP_NO_TIMESTAMP,
    SOURCE_IDS,
    SourceRead,
    SourceRequest,
    skip,
)
from llmreplay.prefix_hash import block_count
from llmreplay.trace_format import MOONCAKE_BLOCK_SIZE

_TEXT_FIELDS = ("text_input", "messages", "payload")


def read_mooncake(path: Path, block_size: int | None = None) -> SourceRead:
    """Parse the file; `block_size` overrides 512 for files written with another block size."""
    block_size = block_size or MOONCAKE_BLOCK_SIZE
    requests: list[SourceRequest] = []
    skipped: dict[str, list[int]] = {}
    any_hashes = False
    for line_no, row in iter_jsonl(path):
        request = _request(row, f"{path}:{line_no}", line_no, block_size)
        if request is None:
            continue
        if request.prompt_tokens == 0 and request.completion_tokens == 0:
            skip(skipped, SKIP_FAILED, line_no)
        elif request.arrival_us is None and request.session_id is None:
            skip(skipped, SKIP_NO_TIMESTAMP, line_no)
        else:
            any_hashes = any_hashes or bool(request.prefix_block_hashes)
            requests.append(request)
    extra = {"messages": "one user message of input_length tokens (the source has no message structure)"}
    if any_hashes:
        extra[HASH_ID_ORIGIN_KEY] = SOURCE_IDS
    return SourceRead(
        requests=requests,
        skipped=skipped,
        block_size=block_size,
        relative_time=True,
        has_prefix_hashes=any_hashes,
        extra=extra,
    )


def _request(row: dict, where: str, line_no: int, block_size: int) -> SourceRequest | None:
    for name in _TEXT_FIELDS:
        if name in row:
            raise BadInput(
                f"{where}: '{name}' rows carry text, not lengths; only shape rows (input_length) import"
            )
    if "input_length" not in row:
        raise BadInput(f"{where}: field 'input_length' is missing")
    prompt_tokens = count_field(row["input_length"], where, "input_length")
    output = row.get("output_length")
    completion_tokens = None if output is None else count_field(output, where, "output_length")
    hashes = _hash_ids(row.get("hash_ids"), where, prompt_tokens, block_size)
    session_id = row.get("session_id")
    if session_id is not None and not isinstance(session_id, str | int):
        raise BadInput(f"{where}: field 'session_id' is not a string: {session_id!r}")
    arrival_us = None if is_blank(row.get("timestamp")) else _ms_to_us(row["timestamp"], where, "timestamp")
    delay = row.get("delay")
    delay_ns = None if is_blank(delay) else _ms_to_us(delay, where, "delay") * 1000
    return SourceRequest(
        line=line_no,
        arrival_us=arrival_us,
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        prefix_block_hashes=hashes,
        session_id=None if session_id is None else str(session_id),
        delay_ns=delay_ns,
    )


def _ms_to_us(value, where: str, name: str) -> int:
    number = number_field(value, where, name)
    if number < 0:
        raise BadInput(f"{where}: field '{name}' is negative: {value!r}")
    return number * 1000 if isinstance(number, int) else round(number * 1000)


def _hash_ids(value, where: str, prompt_tokens: int, block_size: int) -> tuple[int, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(h, int) and not isinstance(h, bool) for h in value):
        raise BadInput(f"{where}: field 'hash_ids' must be a list of integers")
    if any(h < 0 or h >= 1 << 63 for h in value):
        raise BadInput(f"{where}: field 'hash_ids' holds an id outside 0..2^63-1")
    expected = block_count(prompt_tokens, block_size)
    if value and len(value) != expected:
        raise BadInput(
            f"{where}: {len(value)} hash_ids for input_length {prompt_tokens}, expected {expected} blocks of "
            f"{block_size} tokens (a file with another block size needs --block-size)"
        )
    return tuple(value)
