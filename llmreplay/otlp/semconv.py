"""The OpenTelemetry names this export uses: the GenAI semantic conventions as packaged by
opentelemetry-semantic-conventions (schema SEMCONV_VERSION), their units and advised bucket boundaries.

A metric is a row of METRICS; its name and attribute keys are the package's constants, not literals.
"""

from __future__ import annotations

from dataclasses import dataclass

from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai
from opentelemetry.semconv._incubating.attributes import service_attributes as service_incubating
from opentelemetry.semconv._incubating.metrics import gen_ai_metrics
from opentelemetry.semconv.attributes import (
    error_attributes,
    http_attributes,
    server_attributes,
    service_attributes,
)
from opentelemetry.semconv.schemas import Schemas

# The schema whose registry the constants come from. The GenAI names are those the main repository held
# when it handed them to semantic-conventions-genai (1.42); the package still ships them, marked "moved".
SCHEMA = Schemas.V1_44_0
SEMCONV_VERSION = SCHEMA.value.rsplit("/", 1)[-1]
SCOPE_NAME = "llmreplay"

OPERATION_NAME = gen_ai.GEN_AI_OPERATION_NAME
PROVIDER_NAME = gen_ai.GEN_AI_PROVIDER_NAME
REQUEST_MODEL = gen_ai.GEN_AI_REQUEST_MODEL
TOKEN_TYPE = gen_ai.GEN_AI_TOKEN_TYPE
SERVER_ADDRESS = server_attributes.SERVER_ADDRESS
SERVER_PORT = server_attributes.SERVER_PORT
ERROR_TYPE = error_attributes.ERROR_TYPE
HTTP_STATUS = http_attributes.HTTP_RESPONSE_STATUS_CODE
SERVICE_NAME = service_attributes.SERVICE_NAME
SERVICE_VERSION = service_attributes.SERVICE_VERSION
SERVICE_INSTANCE_ID = service_incubating.SERVICE_INSTANCE_ID
SPAN = gen_ai  # the span attributes: gen_ai.GEN_AI_USAGE_INPUT_TOKENS, ...

# The trace's endpoint -> gen_ai.operation.name (Responses and Anthropic Messages are chat).
_OPERATION = gen_ai.GenAiOperationNameValues
OPERATIONS = {
    "chat_completions": _OPERATION.CHAT.value,
    "completions": _OPERATION.TEXT_COMPLETION.value,
    "embeddings": _OPERATION.EMBEDDINGS.value,
    "responses": _OPERATION.CHAT.value,
    "messages": _OPERATION.CHAT.value,
}
TOKEN_TYPES = (gen_ai.GenAiTokenTypeValues.INPUT.value, gen_ai.GenAiTokenTypeValues.OUTPUT.value)

# The semconv's advised ExplicitBucketBoundaries: seconds for the client latencies, tokens for usage.
LATENCY_BOUNDS_S = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)
TOKEN_BOUNDS = tuple(float(4**k) for k in range(14))  # 1, 4, 16, ... 67108864


@dataclass(frozen=True, slots=True)
class MetricSpec:
    name: str
    unit: str
    description: str
    bounds: tuple[float, ...]


DURATION = MetricSpec(
    gen_ai_metrics.GEN_AI_CLIENT_OPERATION_DURATION,
    "s",
    "GenAI operation duration: request sent -> last byte (llmreplay's E2E), every request sent.",
    LATENCY_BOUNDS_S,
)
TOKEN_USAGE = MetricSpec(
    gen_ai_metrics.GEN_AI_CLIENT_TOKEN_USAGE,
    "{token}",
    "Input and output tokens of the successful requests (the server's usage, else counted).",
    TOKEN_BOUNDS,
)
TIME_TO_FIRST_CHUNK = MetricSpec(
    gen_ai_metrics.GEN_AI_CLIENT_OPERATION_TIME_TO_FIRST_CHUNK,
    "s",
    "Request sent -> first chunk carrying generated tokens (llmreplay's TTFT), successful streamed requests.",
    LATENCY_BOUNDS_S,
)
TIME_PER_OUTPUT_CHUNK = MetricSpec(
    gen_ai_metrics.GEN_AI_CLIENT_OPERATION_TIME_PER_OUTPUT_CHUNK,
    "s",
    "Gap between consecutive chunks carrying generated tokens (llmreplay's ITL), successful streamed requests.",
    LATENCY_BOUNDS_S,
)
METRICS = (DURATION, TOKEN_USAGE, TIME_TO_FIRST_CHUNK, TIME_PER_OUTPUT_CHUNK)
