"""From parsed source requests to trace records: arrival order, sessions, think times.

Pure functions over `SourceRequest` lists; no file I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from llmreplay.importers.source_request import SKIP_NO_ANCHOR, SourceRequest, skip
from llmreplay.trace_format import MessageShape, TraceRecord

IMPORTED_ENDPOINT = "chat_completions"
IMPORTED_STREAM = True  # public traces do not say; chat serving traces are overwhelmingly streamed


@dataclass(frozen=True, slots=True)
class Assembly:
    records: list[TraceRecord]
    reordered_rows: int  # rows found earlier in the file than their arrival (moved by a stable sort)
    clamped_think_times: int  # negative think times (overlapping turns, coarse e2e) set to 0
    sessions: int


def assemble(requests: list[SourceRequest], source_name: str, skipped: dict[str, list[int]]) -> Assembly:
    """Resolve delay-only turns, sort by arrival (stable: ties keep file order), link sessions.

    Later turns whose session has no timestamped earlier turn are added to `skipped`.
    """
    anchored = _resolve_delays(requests, skipped)
    reordered = _out_of_order_count(anchored)
    if reordered:
        anchored.sort(key=lambda r: r.arrival_us)
    records, clamped, sessions = _link_sessions(anchored, source_name)
    return Assembly(records=records, reordered_rows=reordered, clamped_think_times=clamped, sessions=sessions)


def _resolve_delays(requests: list[SourceRequest], skipped: dict[str, list[int]]) -> list[SourceRequest]:
    """Give delay-only turns an arrival: previous turn's arrival + its e2e (0 when unknown) + delay.

    Turns follow each other in file order within a session, as AIPerf reads them.
    """
    last_turn: dict[str, SourceRequest] = {}
    resolved = []
    for request in requests:
        if request.arrival_us is None:
            previous = last_turn.get(request.session_id) if request.session_id is not None else None
            if previous is None:
                skip(skipped, SKIP_NO_ANCHOR, request.line)
                continue
            gap_ns = (previous.e2e_ns or 0) + (request.delay_ns or 0)
            request = replace(request, arrival_us=previous.arrival_us + gap_ns // 1000)
        if request.session_id is not None:
            last_turn[request.session_id] = request
        resolved.append(request)
    return resolved


def _out_of_order_count(requests: list[SourceRequest]) -> int:
    latest = None
    count = 0
    for request in requests:
        if latest is not None and request.arrival_us < latest:
            count += 1
        else:
            latest = request.arrival_us
    return count


def _link_sessions(requests: list[SourceRequest], source_name: str) -> tuple[list[TraceRecord], int, int]:
    """Turn index, parent and think time per session, in arrival order.

    Think time = this arrival - previous turn's arrival - previous turn's e2e when the source records
    e2e, else the plain arrival gap; an explicit source delay wins over both.
    """
    previous: dict[str, tuple[TraceRecord, int]] = {}  # session -> (last record, turns so far)
    records = []
    clamped = 0
    for request in requests:
        request_id = request.request_id or f"{source_name}-{request.line}"
        turn_index, parent_id, think_ns = 0, None, None
        if request.session_id is not None and request.session_id in previous:
            parent, turns = previous[request.session_id]
            turn_index, parent_id = turns, parent.request_id
            if request.delay_ns is not None:
                think_ns = request.delay_ns
            else:
                think_ns = (request.arrival_us - parent.arrival_time) * 1000 - (parent.e2e_ns or 0)
                if think_ns < 0:
                    clamped += 1
                    think_ns = 0
        record = _record(request, request_id, turn_index, parent_id, think_ns)
        if request.session_id is not None:
            previous[request.session_id] = (record, turn_index + 1)
        records.append(record)
    return records, clamped, len(previous)


def _record(
    request: SourceRequest, request_id: str, turn_index: int, parent_id: str | None, think_ns: int | None
) -> TraceRecord:
    messages = request.messages
    if messages is None:
        messages = (MessageShape("user", request.prompt_tokens),)
    return TraceRecord(
        request_id=request_id,
        arrival_time=request.arrival_us,
        endpoint=request.endpoint or IMPORTED_ENDPOINT,
        prompt_tokens=request.prompt_tokens,
        token_source="imported",
        session_id=request.session_id,
        turn_index=turn_index,
        parent_request_id=parent_id,
        think_time_ns=think_ns,
        model=request.model,
        stream=IMPORTED_STREAM if request.stream is None else request.stream,
        max_tokens=request.max_tokens,
        ttft_ns=request.ttft_ns,
        cached_tokens=request.cached_tokens,
        cache_write_tokens=request.cache_write_tokens,
        completion_tokens=request.completion_tokens,
        messages=messages,
        prefix_block_hashes=request.prefix_block_hashes,
        e2e_ns=request.e2e_ns,
    )
