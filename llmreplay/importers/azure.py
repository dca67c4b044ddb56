"""Azure LLM inference traces (Splitwise 2023, and the 2024 week-long files): TIMESTAMP, ContextTokens, GeneratedTokens.

TIMESTAMP is absolute wall-clock time: `2023-11-16 18:17:03.9799600` (7 fraction digits, no zone:
read as UTC) or `2024-05-10 00:00:00.009930+00:00`. Digits below the microsecond are dropped.
"""

from __future__ import annotations

import datetime
import re
from pathlib import Path

from llmreplay.errors import BadInput
from llmreplay.importers.source_files import count_field, is_blank, iter_csv
from llmreplay.importers.source_request import SKIP_FAILED, SKIP_NO_TIMESTAMP, SourceRead, SourceRequest, skip
from llmreplay.trace_format import DEFAULT_BLOCK_SIZE

COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
_TIMESTAMP = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[ T](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?\s*(Z|[+-]\d{2}:?\d{2})?"
)


def read_azure(path: Path) -> SourceRead:
    requests: list[SourceRequest] = []
    skipped: dict[str, list[int]] = {}
    zone_missing = False
    for line_no, row in iter_csv(path, COLUMNS):
        where = f"{path}:{line_no}"
        prompt_tokens = count_field(row["ContextTokens"], where, "ContextTokens")
        completion_tokens = count_field(row["GeneratedTokens"], where, "GeneratedTokens")
        if is_blank(row["TIMESTAMP"]):
            skip(skipped, SKIP_NO_TIMESTAMP, line_no)
            continue
        if prompt_tokens == 0 and completion_tokens == 0:
            skip(skipped, SKIP_FAILED, line_no)
            continue
        arrival_us, has_zone = parse_timestamp_us(row["TIMESTAMP"], where)
        zone_missing = zone_missing or not has_zone
        requests.append(SourceRequest(line_no, arrival_us, prompt_tokens, completion_tokens))
    extra = {"messages": "one user message of ContextTokens tokens (the source has no message structure)"}
    if zone_missing:
        extra["time_zone_assumed"] = "UTC (TIMESTAMP carries no offset)"
    return SourceRead(
        requests=requests,
        skipped=skipped,
        block_size=DEFAULT_BLOCK_SIZE,
        relative_time=False,
        has_prefix_hashes=False,
        extra=extra,
    )


def parse_timestamp_us(text: str, where: str) -> tuple[int, bool]:
    """Microseconds since the Unix epoch, and whether the text carried a UTC offset."""
    match = _TIMESTAMP.fullmatch(text.strip())
    if match is None:
        raise BadInput(f"{where}: field 'TIMESTAMP' is not a date-time: {text!r}")
    year, month, day, hour, minute, second = (int(g) for g in match.groups()[:6])
    fraction, zone = match.group(7) or "", match.group(8)
    try:
        moment = datetime.datetime(year, month, day, hour, minute, second, tzinfo=datetime.UTC)
    except ValueError as exc:
        raise BadInput(f"{where}: field 'TIMESTAMP' is not a valid date-time: {text!r} ({exc})") from None
    seconds = int(moment.timestamp()) - _zone_offset_s(zone)
    micros = int((fraction + "000000")[:6])
    return seconds * 1_000_000 + micros, zone is not None


def _zone_offset_s(zone: str | None) -> int:
    if zone is None or zone == "Z":
        return 0
    sign = -1 if zone[0] == "-" else 1
    digits = zone[1:].replace(":", "")
    return sign * (int(digits[:2]) * 3600 + int(digits[2:]) * 60)
