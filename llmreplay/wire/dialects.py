"""The dialects: how each API's requests, stream events and answers are read, and how a replayed body
is laid out (its module's BODY), built from the ENDPOINTS rows (endpoints.py): adding an API is adding a
module and a row there (docs/extending.md, "An API"). Pure, light imports.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from llmreplay.wire.answer import Answer
from llmreplay.wire.api_body import ApiBody
from llmreplay.wire.endpoints import DIALECT_OF, ENDPOINTS
from llmreplay.wire.message_text import PromptMessage
from llmreplay.wire.stream_event import EventFacts
from llmreplay.wire.usage import Usage, parse_usage


@dataclass(frozen=True, slots=True)
class Dialect:
    name: str
    request_messages: Callable[[dict], tuple[PromptMessage, ...]]  # prompt order, system first
    request_tools: Callable[[dict], tuple[dict, ...]]  # chat-like {name, description, parameters}
    request_tool_choice: Callable[[dict], str | None]  # trace_format.TOOL_CHOICES
    request_structured: Callable[[dict], tuple[str, dict | None]]  # (STRUCTURED_OUTPUT_KINDS, schema)
    request_format: Callable[[dict], object]  # the API's own output-format object, as sent
    max_output_tokens: Callable[[dict], int | None]
    server_state: Callable[[dict], tuple[str | None, str | None]]  # (SERVER_STATES value, its id)
    event_channel: Callable[[str | None, dict], str | None]  # ANSWER | REASONING | None
    response_id: Callable[[dict], str | None]
    answer: Callable[[dict], Answer]  # a whole 200 body
    item_text: Callable[[object], tuple[str, str]]  # one prompt item's (role, counted text)
    echoed_answers: Callable[[object], tuple[tuple[PromptMessage, ...], ...]]  # a ResponseShape's echoes
    end_events: tuple[str, ...]  # stream event types after which nothing more is generated
    typed_events: bool  # stream events carry `type` (and an `event:` line) instead of chat chunks
    event_facts: Callable[[str, dict], EventFacts] | None = None  # typed streams: all but the tokens
    usage: Callable[[object], Usage] = parse_usage
    # Typed streams only (a module's owns_event, DELTA_RULES, PARSED_EVENTS, fold_text):
    owns_event: Callable[[str], bool] | None = None  # an event `type` of this API
    delta_rules: dict = field(default_factory=dict)  # event name -> ((text keys, channel), ...)
    parsed_events: tuple[str, ...] = ()  # read whole (event_facts), besides end events and `error`
    fold_text: Callable[[str, dict, list, list, dict], None] | None = None  # the reference reading's texts
    body: ApiBody | None = None  # the write rules (a module's BODY): how a replayed body lays it out


_READERS = ("request_messages", "request_tools", "request_tool_choice", "request_structured", "request_format")
_READERS += ("max_output_tokens", "server_state", "event_channel", "response_id", "answer")
_RULES = (*_READERS, "item_text", "echoed_answers")  # the readers of a body, then of an item and an answer


def _row(name: str, module) -> Dialect:
    """A dialect whose readers are its module's functions of the same names (a reader the module
    lacks: its READS_AS module's), and whose write rules are its module's BODY. Its stream is typed
    when the module says which events are its own (owns_event)."""
    shares = getattr(module, "READS_AS", None)
    readers = {reader: getattr(module, reader, None) or getattr(shares, reader) for reader in _RULES}
    typed_events = getattr(module, "owns_event", None) is not None
    typed = {
        "event_facts": getattr(module, "event_facts", None),
        "owns_event": getattr(module, "owns_event", None),
        "delta_rules": getattr(module, "DELTA_RULES", {}),
        "parsed_events": getattr(module, "PARSED_EVENTS", ()),
        "fold_text": getattr(module, "fold_text", None),
    }
    ends = getattr(module, "END_EVENTS", ())
    body = getattr(module, "BODY", None)
    return Dialect(name, **readers, end_events=ends, typed_events=typed_events, **typed, body=body)


DIALECTS = {endpoint.dialect: _row(endpoint.dialect, endpoint.api) for endpoint in ENDPOINTS}


def api_body(endpoint: str) -> ApiBody | None:
    """The write rules of a trace endpoint's dialect (None: an endpoint without a row)."""
    dialect = DIALECT_OF.get(endpoint)
    return DIALECTS[dialect].body if dialect is not None else None


def dialect_for(endpoint: str) -> Dialect:
    """The dialect of a trace endpoint value (an unknown one reads as chat, as the recorder names it)."""
    return DIALECTS[DIALECT_OF.get(endpoint, "chat")]


def typed_dialect(event_type: str) -> Dialect | None:
    """The first dialect whose stream sends events of this `type` (its owns_event); None for others.
    `error` is the same event in Responses and Messages: Responses' row, first, reads it."""
    for dialect in DIALECTS.values():
        if dialect.owns_event is not None and dialect.owns_event(event_type):
            return dialect
    return None
