"""The endpoint table: the trace's endpoint names, their URL paths, and what each one answers with.

Adding an endpoint is adding a row; the recorder names a path by it, the replayer sends to it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Endpoint:
    name: str  # the trace's `endpoint` value
    path: str  # on an OpenAI-compatible server
    replayable: bool  # the replayer can build its request from a trace row
    generates: bool  # the answer carries generated tokens (an embedding does not)
    dialect: str  # its row in llmreplay.wire.dialects.DIALECTS: request, stream and usage grammar


# Longest suffix first: a recorded path is named by the first row whose path ends it.
ENDPOINTS = (
    Endpoint("chat_completions", "/v1/chat/completions", replayable=True, generates=True, dialect="chat"),
    Endpoint("completions", "/v1/completions", replayable=True, generates=True, dialect="completions"),
    Endpoint("embeddings", "/v1/embeddings", replayable=True, generates=False, dialect="embeddings"),
    Endpoint("responses", "/v1/responses", replayable=True, generates=True, dialect="responses"),
    Endpoint("messages", "/v1/messages", replayable=True, generates=True, dialect="messages"),  # Anthropic
)
ENDPOINT_NAMES = tuple(endpoint.name for endpoint in ENDPOINTS)
DEFAULT_ENDPOINT = "chat_completions"  # a path matching no row: gateways put chat behind odd paths
DIALECT_OF = {endpoint.name: endpoint.dialect for endpoint in ENDPOINTS}
REPLAY_PATHS = {endpoint.name: endpoint.path for endpoint in ENDPOINTS if endpoint.replayable}
_BY_SUFFIX = tuple((endpoint.path.removeprefix("/v1"), endpoint.name) for endpoint in ENDPOINTS)
_DIALECT_BY_PATH = {endpoint.path: endpoint.dialect for endpoint in ENDPOINTS}


def endpoint_for_path(path: str) -> str:
    """The trace's endpoint name for a recorded URL path (query string ignored)."""
    path = path.split("?", 1)[0].rstrip("/")
    for suffix, name in _BY_SUFFIX:
        if path.endswith(suffix):
            return name
    return DEFAULT_ENDPOINT


def dialect_for_path(path: str) -> str:
    """The dialect of the answer to a request sent to `path` (the replayer's paths are the table's)."""
    return _DIALECT_BY_PATH.get(path) or DIALECT_OF[endpoint_for_path(path)]
