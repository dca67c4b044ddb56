"""The engine table: one row per serving engine — how to recognise it, how to force its output
length, where it reports cached tokens, what its Prometheus names are and how it spells /tokenize. Adding an engine is adding
a row (and its test in tests/llmreplay/test_engines.py). Standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Values of a length-forcing field: FLAG is `true`; LIMIT and FLOOR are the requested output length.
# A FLOOR (min_tokens) is left out when the replay mirrors a client cancel: the engine must be able
# to stop before the floor when the client hangs up.
FLAG, LIMIT, FLOOR = "flag", "limit", "floor"
SIM_OWNED_BY = "llmreplay-sim"  # `llmreplay sim`'s owned_by: it speaks vLLM's extensions and names


@dataclass(frozen=True, slots=True)
class Probe:
    """GET `path`; a JSON object whose `key` holds a value containing `contains` names the engine."""

    path: str
    key: str
    contains: str = ""


@dataclass(frozen=True, slots=True)
class Lookup:
    """GET `path`; the value found by following `keys` (object keys or list indices) in its JSON answer."""

    path: str
    keys: tuple[str | int, ...]


@dataclass(frozen=True, slots=True)
class PrometheusNames:
    """The engine's own names for what a queue forms from; None where it exposes none."""

    running: str | None = None
    waiting: str | None = None
    kv_cache_usage: str | None = None  # a 0..1 gauge
    prefix_cache_queries: str | None = None  # counter of prompt tokens looked up
    prefix_cache_hits: str | None = None  # counter of prompt tokens found
    prefix_cache_hit_rate: str | None = None  # a gauge, for engines without the two counters
    preemptions: str | None = None


@dataclass(frozen=True, slots=True)
class TokenizeSpelling:
    """How the engine spells /tokenize and /detokenize (llmreplay.engine_tokenizer speaks it)."""

    spec_name: str  # DIALECT in `--tokenizer engine:DIALECT:MODEL@URL` (as traces already store it)
    text_field: str  # the body field holding the text to tokenize
    special_field: str  # the body flag adding BOS and the like
    pieces_field: str  # the body flag asking for each token's text too
    model_in_body: bool  # the model is named in every body
    pieces_at: str | None  # answer key of the token texts beside `tokens`; None: tokens are {id, piece}
    detokenized_at: str  # answer key of /detokenize's text
    chat_template: str  # "messages": /tokenize takes chat messages and answers `count`;
    # "apply-template": /apply-template renders them, then /tokenize counts the text with specials parsed


@dataclass(frozen=True, slots=True)
class Engine:
    name: str  # the --engine value and run.json's `engine`
    title: str
    source: str  # where the row's facts come from: tested against, or the doc/code read
    owned_by: tuple[str, ...] = ()  # substrings of /v1/models `owned_by` (lower case)
    server_header: tuple[str, ...] = ()  # substrings of the `Server` response header (lower case)
    probes: tuple[Probe, ...] = ()  # asked only when neither of the above named an engine
    force_length: tuple[tuple[str, str], ...] = ()  # (request field, FLAG | LIMIT | FLOOR); () cannot
    # per endpoint where it differs from `force_length` (the chat and completions fields):
    # (endpoint, its fields); an endpoint named with () cannot force the length there
    force_length_on: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = ()
    rejects_unknown_fields: bool = False  # nothing beyond its declared fields may be sent
    # False: under a grammar (response_format, a required tool call) forcing the length past the
    # grammar's end fails the request, so only max_tokens is sent there
    forces_length_under_grammar: bool = True
    cache_salt: bool = False  # accepts `cache_salt` (isolates a request's prefix cache)
    cached_tokens: str | None = None  # where the answer reports cached prompt tokens
    cached_tokens_flag: str | None = None  # the server flag without which it is not reported
    reasoning_field: str | None = None  # the delta field carrying reasoning tokens
    stream_usage: tuple[str, ...] = ()  # `stream_options` keys it honours for usage in a stream
    metrics_path: str | None = None  # its Prometheus endpoint, None when it has none
    metrics: PrometheusNames = field(default_factory=PrometheusNames)
    version: Lookup | None = None  # where it states its version (replayer.preflight)
    context_tokens: Lookup | None = None  # where it states its context length, prompt + output
    refusal_fixes: tuple[tuple[str, str], ...] = ()  # (feature refused by default, server flag to fix)
    tokenize: TokenizeSpelling | None = None  # its /tokenize; None: it has none (or not verified)

    @property
    def forces_length(self) -> bool:
        """False: answers may stop early at EOS, so output lengths can fall short of the trace."""
        return bool(self.force_length)

    def length_forcing(self, endpoint: str) -> tuple[tuple[str, str], ...]:
        """The fields that force the output length on `endpoint` (its row in `force_length_on`, else
        `force_length`)."""
        return dict(self.force_length_on).get(endpoint, self.force_length)


_USAGE = "prompt_tokens_details.cached_tokens"

ENGINES: tuple[Engine, ...] = (
    Engine(
        "vllm",
        "vLLM",
        "tested against real vLLM 0.32.0 CPU (tests/engines); reasoning and cache_salt from its "
        "entrypoints/openai/chat_completion/protocol.py; Responses/Messages fields from "
        "entrypoints/openai/responses/protocol.py and entrypoints/anthropic/protocol.py",
        owned_by=("vllm", SIM_OWNED_BY),  # its /version answers {"version"} like many servers: no probe
        force_length=(("ignore_eos", FLAG), ("min_tokens", FLOOR)),
        # ResponsesRequest has ignore_eos but no min_tokens; AnthropicMessagesRequest has neither
        # (pydantic drops unknown fields): a Messages answer may stop early at EOS
        force_length_on=(("responses", (("ignore_eos", FLAG),)), ("messages", ())),
        cache_salt=True,
        cached_tokens=f"usage.{_USAGE}",
        cached_tokens_flag="--enable-prompt-tokens-details",
        reasoning_field="reasoning",
        stream_usage=("include_usage", "continuous_usage_stats"),
        metrics_path="/metrics",
        metrics=PrometheusNames(
            running="vllm:num_requests_running",
            waiting="vllm:num_requests_waiting",
            kv_cache_usage="vllm:kv_cache_usage_perc",
            prefix_cache_queries="vllm:prefix_cache_queries_total",
            prefix_cache_hits="vllm:prefix_cache_hits_total",
            preemptions="vllm:num_preemptions_total",
        ),
        version=Lookup("/version", ("version",)),
        context_tokens=Lookup("/v1/models", ("data", 0, "max_model_len")),
        refusal_fixes=(("tools", "--enable-auto-tool-choice --tool-call-parser <parser>"),),
        tokenize=TokenizeSpelling(
            "vllm", "prompt", "add_special_tokens", "return_token_strs", True, "token_strs", "prompt", "messages"
        ),
    ),
    Engine(
        "sglang",
        "SGLang",
        "docs.sglang.io (native_api, production_metrics); sgl-project/sglang "
        "python/sglang/srt/entrypoints/openai/protocol.py",
        owned_by=("sglang",),
        probes=(Probe("/get_server_info", "tp_size"), Probe("/server_info", "tp_size")),
        force_length=(("ignore_eos", FLAG), ("min_tokens", FLOOR)),
        cache_salt=True,
        cached_tokens=f"usage.{_USAGE}",
        cached_tokens_flag="--enable-cache-report",
        reasoning_field="reasoning_content",
        stream_usage=("include_usage", "continuous_usage_stats"),
        metrics_path="/metrics",  # with --enable-metrics
        metrics=PrometheusNames(
            running="sglang:num_running_reqs",
            waiting="sglang:num_queue_reqs",
            kv_cache_usage="sglang:token_usage",
            prefix_cache_hit_rate="sglang:cache_hit_rate",
        ),
        version=Lookup("/get_server_info", ("version",)),
        context_tokens=Lookup("/v1/models", ("data", 0, "max_model_len")),
        refusal_fixes=(("tools", "--tool-call-parser <parser>"),),
    ),
    Engine(
        "trtllm",
        "TensorRT-LLM",
        "NVIDIA/TensorRT-LLM tensorrt_llm/serve/openai_protocol.py (ModelCard owned_by, ignore_eos, "
        "min_tokens, cache_salt), tensorrt_llm/metrics/collector.py, examples/serve/prometheus_metrics.py",
        owned_by=("tensorrt", "trtllm"),
        server_header=("tensorrt", "trtllm"),
        force_length=(("ignore_eos", FLAG), ("min_tokens", FLOOR)),
        rejects_unknown_fields=True,
        cache_salt=True,
        cached_tokens=f"usage.{_USAGE}",
        reasoning_field="reasoning_content",
        stream_usage=("include_usage",),
        metrics_path="/prometheus/metrics",
        metrics=PrometheusNames(
            running="trtllm_num_requests_running",
            waiting="trtllm_num_requests_waiting",
            kv_cache_usage="trtllm_kv_cache_utilization",
            prefix_cache_hit_rate="trtllm_kv_cache_hit_rate",
        ),
    ),
    Engine(
        "llamacpp",
        "llama.cpp llama-server",
        "tested against real llama.cpp (llama-cpp-python 0.3.36 sdist, commit 0c1e570): "
        "tools/server/server-http.cpp (Server: llama.cpp), server-context.cpp (owned_by llamacpp, /props)",
        owned_by=("llamacpp",),
        server_header=("llama.cpp",),
        probes=(Probe("/props", "build_info"),),
        force_length=(("ignore_eos", FLAG), ("n_predict", LIMIT)),
        cached_tokens=f"usage.{_USAGE} (and timings.cache_n)",
        reasoning_field="reasoning_content",
        stream_usage=("include_usage",),
        metrics_path="/metrics",  # with --metrics
        metrics=PrometheusNames(running="llamacpp:requests_processing", waiting="llamacpp:requests_deferred"),
        version=Lookup("/props", ("build_info",)),
        context_tokens=Lookup("/props", ("default_generation_settings", "n_ctx")),  # per slot
        refusal_fixes=(("tools", "--jinja"),),
        # json_schema with ignore_eos: HTTP 500 "Unexpected empty grammar stack after accepting piece"
        # once the grammar completes (tests/engines/test_engine_recorded_path.py)
        forces_length_under_grammar=False,
        tokenize=TokenizeSpelling(
            "llama.cpp", "content", "add_special", "with_pieces", False, None, "content", "apply-template"
        ),
    ),
    Engine(
        "ollama",
        "Ollama",
        "docs.ollama.com (api-reference/get-version, openai compatibility): no length forcing, "
        "no Prometheus endpoint",
        probes=(Probe("/api/version", "version"),),
        stream_usage=("include_usage",),
    ),
    Engine(
        "tgi",
        "Text Generation Inference",
        "huggingface/text-generation-inference router/src/server.rs (/info router, /v1/models owned_by "
        "is the model id), tgi_* metrics: no length forcing",
        probes=(Probe("/info", "router", "text-generation"),),
        stream_usage=("include_usage",),
        metrics_path="/metrics",
        metrics=PrometheusNames(running="tgi_batch_current_size", waiting="tgi_queue_size"),
    ),
    Engine(
        "openai",
        "OpenAI-compatible (unknown engine)",
        "the OpenAI API reference: nothing beyond its fields is sent",
        stream_usage=("include_usage",),
    ),
)

DEFAULT = ENGINES[-1]  # what an unrecognised server is driven as
TOKENIZE_SPELLINGS = {e.tokenize.spec_name: e.tokenize for e in ENGINES if e.tokenize}  # tried in this order
BY_NAME = {engine.name: engine for engine in ENGINES}
