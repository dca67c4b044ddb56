"""The API table: one row per API, naming the trace's endpoint value, its URL path and the module that
holds its read and write rules (its dialect, llmreplay.wire.dialects, is built from the row).

Adding an API is adding its module and a row; the recorder names a path by it, the replayer sends to it.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType

from llmreplay.wire import chat_api, completions_api, embeddings_api, messages_api, responses_api


@dataclass(frozen=True, slots=True)
class Endpoint:
    name: str  # the trace's `endpoint` value (of trace_format.ENDPOINTS)
    path: str  # on an OpenAI-compatible server
    dialect: str  # its row in llmreplay.wire.dialects.DIALECTS: request, stream and usage grammar
    api: ModuleType  # its readers, stream rules and BODY (the write rules): the dialect's row
    replayable: bool = True  # the replayer can build its request from a trace row
    generates: bool = True  # the answer carries generated tokens (an embedding does not)


# Longest suffix first: a recorded path is named by the first row whose path ends it.
ENDPOINTS = (
    Endpoint("chat_completions", "/v1/chat/completions", "chat", chat_api),
    Endpoint("completions", "/v1/completions", "completions", completions_api),
    Endpoint("embeddings", "/v1/embeddings", "embeddings", embeddings_api, generates=False),
    Endpoint("responses", "/v1/responses", "responses", responses_api),
    Endpoint("messages", "/v1/messages", "messages", messages_api),  # Anthropic
)
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
