"""RAGPulse jsonl: string timestamps (s), per-component hash ids, session ids; two one-week runs.

RAGPulse ids name variable-length segments (the numbered files next to the trace map each id to its
token length), not fixed blocks. So each id is expanded to its length in prompt order and the
resulting sequence is hashed into chained fixed-size blocks; the metadata says so.
"""

from __future__ import annotations

from pathlib import Path

from llmreplay.errors import BadInput
from llmreplay.importers.source_files import count_field, is_blank, iter_jsonl, number_field
from llmreplay.importers.source_request import SKIP_FAILED, SKIP_NO_TIMESTAMP, SourceRead, SourceRequest, skip
from llmreplay.prefix_hash import prefix_block_hashes
from llmreplay.trace_format import DEFAULT_BLOCK_SIZE, MessageShape

COMPONENTS = ("sys_prompt", "passages_ids", "history", "web_search", "user_input")  # prompt order
LENGTH_FILES = {  # file next to the trace -> its id field
    "1_sys_prompt.jsonl": "sys_prompt_id",
    "2_passages.jsonl": "passage_id",
    "3_history.jsonl": "history_id",
    "4_user_input.jsonl": "user_input_id",
    "5_web_search.jsonl": "web_search_id",
}
RUN_PERIOD_S = 7 * 86_400  # each run is one week; session ids (Unix ms) put run 2 exactly a week later
_UNATTRIBUTED_TOKEN = 0xFFFF_FFFF  # stands for prompt tokens no segment accounts for (template)
_DERIVATION = (
    "RAGPulse ids name variable-length segments, not blocks: each id is expanded to its token length "
    "(numbered files) in the order sys_prompt, passages_ids, history, web_search, user_input, followed by "
    "the input_length tokens no segment accounts for; that sequence is hashed into chained blocks"
)


def read_ragpulse(path: Path, block_size: int | None = None) -> SourceRead:
    block_size = block_size or DEFAULT_BLOCK_SIZE
    lengths = read_segment_lengths(path.parent)
    requests: list[SourceRequest] = []
    skipped: dict[str, list[int]] = {}
    runs = _Runs()
    truncated = 0
    for line_no, row in iter_jsonl(path):
        where = f"{path}:{line_no}"
        prompt_tokens = _count(row, "input_length", where)
        completion_tokens = _count(row, "output_length", where)
        if is_blank(row.get("timestamp")):
            skip(skipped, SKIP_NO_TIMESTAMP, line_no)
            continue
        if prompt_tokens == 0 and completion_tokens == 0:
            skip(skipped, SKIP_FAILED, line_no)
            continue
        timestamp_s = number_field(row["timestamp"], where, "timestamp")
        if timestamp_s < 0:
            raise BadInput(f"{where}: field 'timestamp' is negative: {row['timestamp']!r}")
        segments = _segments(row.get("hash_ids"), where, lengths)
        tokens, system_tokens, fits = segment_tokens(segments, prompt_tokens)
        truncated += not fits
        session = row.get("session_id")
        requests.append(
            SourceRequest(
                line=line_no,
                arrival_us=round(runs.offset_s(timestamp_s) * 1_000_000),
                prompt_tokens=prompt_tokens,
                completion_tokens=completion_tokens,
                prefix_block_hashes=tuple(prefix_block_hashes(tokens, block_size)),
                session_id=None if is_blank(session) else str(session),
                messages=_messages(system_tokens, prompt_tokens),
            )
        )
    extra = {
        "prefix_hashes_derivation": _DERIVATION,
        "messages": "system = sys_prompt segments; user = everything else (passages, history, web search, "
        "question, template)",
        "runs": len(runs.offsets_s),
        "run_offsets_s": runs.offsets_s,
        "rows_with_segments_longer_than_input_length": truncated,
    }
    return SourceRead(requests, skipped, block_size, relative_time=True, has_prefix_hashes=True, extra=extra)


class _Runs:
    """The file holds runs back to back; a timestamp going backwards starts the next run."""

    def __init__(self):
        self.offsets_s = [0]
        self._previous_s = None
        self._run_end_s = 0.0

    def offset_s(self, timestamp_s: float) -> float:
        if self._previous_s is not None and timestamp_s < self._previous_s:
            # Normally a week later; never before the end of the previous run.
            next_offset = max(self.offsets_s[-1] + RUN_PERIOD_S, int(self._run_end_s) + 1)
            self.offsets_s.append(next_offset)
        self._previous_s = timestamp_s
        absolute_s = self.offsets_s[-1] + timestamp_s
        self._run_end_s = max(self._run_end_s, absolute_s)
        return absolute_s


def read_segment_lengths(directory: Path) -> dict[int, int]:
    """Token length of every segment id, from the five numbered files next to the trace."""
    lengths: dict[int, int] = {}
    for name, id_field in LENGTH_FILES.items():
        file = directory / name
        if not file.is_file():
            raise BadInput(
                f"{file}: missing; RAGPulse hash ids need the component length files next to the trace"
            )
        for line_no, row in iter_jsonl(file):
            where = f"{file}:{line_no}"
            if id_field not in row or "token_length" not in row:
                raise BadInput(f"{where}: expected fields '{id_field}' and 'token_length'")
            segment_id = count_field(row[id_field], where, id_field)
            length = count_field(row["token_length"], where, "token_length")
            if segment_id >= _UNATTRIBUTED_TOKEN:
                raise BadInput(f"{where}: id {segment_id} is too large (ids must fit in 32 bits)")
            if lengths.setdefault(segment_id, length) != length:
                raise BadInput(f"{where}: id {segment_id} already has token length {lengths[segment_id]}")
    return lengths


def _segments(value, where: str, lengths: dict[int, int]) -> list[tuple[str, int, int]]:
    """(component, id, token length) in prompt order."""
    if not isinstance(value, dict):
        raise BadInput(f"{where}: field 'hash_ids' must be an object of component -> id list")
    segments = []
    for component in COMPONENTS:
        ids = value.get(component, [])
        if not isinstance(ids, list):
            raise BadInput(f"{where}: hash_ids.{component} must be a list")
        for segment_id in ids:
            if isinstance(segment_id, bool) or not isinstance(segment_id, int) or segment_id not in lengths:
                raise BadInput(
                    f"{where}: hash_ids.{component} id {segment_id!r} has no token length in the numbered files"
                )
            segments.append((component, segment_id, lengths[segment_id]))
    return segments


def segment_tokens(segments: list[tuple[str, int, int]], prompt_tokens: int) -> tuple[list[int], int, bool]:
    """Stand-in token ids (the segment id, repeated over its length), system-prompt tokens, and
    whether the segments fit in `prompt_tokens` (else they are cut at it)."""
    tokens: list[int] = []
    system_tokens = 0
    for component, segment_id, length in segments:
        tokens.extend([segment_id] * length)
        if component == "sys_prompt":
            system_tokens += length
    fits = len(tokens) <= prompt_tokens
    if fits:
        tokens.extend([_UNATTRIBUTED_TOKEN] * (prompt_tokens - len(tokens)))
    else:
        del tokens[prompt_tokens:]
    return tokens, min(system_tokens, prompt_tokens), fits


def _messages(system_tokens: int, prompt_tokens: int) -> tuple[MessageShape, ...]:
    user = MessageShape("user", prompt_tokens - system_tokens)
    return (MessageShape("system", system_tokens), user) if system_tokens else (user,)


def _count(row: dict, name: str, where: str) -> int:
    if name not in row:
        raise BadInput(f"{where}: field '{name}' is missing")
    return count_field(row[name], where, name)
