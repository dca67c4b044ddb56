"""When a 200 stream that ended is whole: one rule for the recorder and the replay loop (DESIGN
principle 8), so a stream cut short is `stream_truncated` on both sides alike."""

from __future__ import annotations


def missing_end(done: bool, finish_reason: str | None, end_events: tuple[str, ...] = ()) -> str | None:
    """What the stream lacks, None when it is whole: its end (chat's [DONE], a typed dialect's first
    end event) and a finish reason, both; a stream cut between the two (a Messages message_delta
    without its message_stop, a chat finish chunk without [DONE]) is truncated."""
    if not done:
        return end_events[0] if end_events else "[DONE]"
    return "a finish reason" if finish_reason is None else None
