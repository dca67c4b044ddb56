"""BurstGPT CSV, read by column name: v1 (Timestamp, Model, Request/Response tokens, ...) and v2,
which inserts Session ID and Elapsed time (end-to-end latency, s) at positions 1-2.

Timestamp counts seconds from 0:00 of the trace's first (unnamed) day, so the trace is relative.
BurstGPT marks failed requests with 0 response tokens: they are reported and skipped.
"""

from __future__ import annotations

from pathlib import Path

from llmreplay.errors import BadInput
from llmreplay.importers.source_files import count_field, is_blank, iter_csv, number_field
from llmreplay.importers.source_request import (
    SKIP_FAILED,
    SKIP_FAILED_NO_OUTPUT,
    SKIP_NO_TIMESTAMP,
    SourceRead,
    SourceRequest,
    skip,
)
from llmreplay.trace_format import DEFAULT_BLOCK_SIZE

REQUIRED = ("Timestamp", "Request tokens", "Response tokens")
SESSION_COLUMNS = ("Session ID", "Elapsed time")


def read_burstgpt(path: Path) -> SourceRead:
    requests: list[SourceRequest] = []
    skipped: dict[str, list[int]] = {}
    columns: set[str] = set()
    for line_no, row in iter_csv(path, REQUIRED):
        columns = columns or set(row)
        where = f"{path}:{line_no}"
        prompt_tokens = count_field(row["Request tokens"], where, "Request tokens")
        completion_tokens = count_field(row["Response tokens"], where, "Response tokens")
        if is_blank(row["Timestamp"]):
            skip(skipped, SKIP_NO_TIMESTAMP, line_no)
        elif completion_tokens == 0:
            skip(skipped, SKIP_FAILED if prompt_tokens == 0 else SKIP_FAILED_NO_OUTPUT, line_no)
        else:
            requests.append(_request(row, where, line_no, prompt_tokens, completion_tokens))
    version = "v2" if all(name in columns for name in SESSION_COLUMNS) else "v1"
    extra = {
        "burstgpt_columns": version,
        "messages": "one user message of Request tokens tokens (the source has no message structure)",
    }
    if version == "v2":
        extra["e2e_source"] = "Elapsed time (whole seconds)"
    return SourceRead(
        requests=requests,
        skipped=skipped,
        block_size=DEFAULT_BLOCK_SIZE,
        relative_time=True,
        has_prefix_hashes=False,
        extra=extra,
    )


def _request(
    row: dict, where: str, line_no: int, prompt_tokens: int, completion_tokens: int
) -> SourceRequest:
    timestamp_s = number_field(row["Timestamp"], where, "Timestamp")
    if timestamp_s < 0:
        raise BadInput(f"{where}: field 'Timestamp' is negative: {row['Timestamp']!r}")
    elapsed = row.get("Elapsed time")
    e2e_ns = None
    if not is_blank(elapsed):
        elapsed_s = number_field(elapsed, where, "Elapsed time")
        if elapsed_s < 0:
            raise BadInput(f"{where}: field 'Elapsed time' is negative: {elapsed!r}")
        e2e_ns = round(elapsed_s * 1_000_000_000)
    session = row.get("Session ID")
    model = row.get("Model")
    return SourceRequest(
        line=line_no,
        arrival_us=round(timestamp_s * 1_000_000),
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        session_id=None if is_blank(session) else session,
        e2e_ns=e2e_ns,
        model=None if is_blank(model) else model,
    )
