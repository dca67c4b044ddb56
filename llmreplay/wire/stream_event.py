"""What one typed stream event (Responses, Messages) says besides its tokens: usage, the end, an
error, the response id, a tool call opening. One reading for the recorder and the replay loop."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class EventFacts:
    usage: dict | None = None  # a usage report (Messages: running totals, merged over the stream)
    finish_reason: str | None = None  # chat's vocabulary (dialect's finish_reason)
    done: bool = False  # the stream's end event
    failed: str | None = None  # an error event or a failed response: its message
    response_id: str | None = None
    call_key: object = None  # a tool call opened by this event (the replayer counts distinct keys)


NO_FACTS = EventFacts()


def event_type(event_name: str | None, data: dict) -> str | None:
    """A typed event's type: its data's `type` when that is a string, else its `event:` line's name."""
    kind = data.get("type")
    return kind if isinstance(kind, str) and kind else event_name
