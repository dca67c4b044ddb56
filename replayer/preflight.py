"""The preflight: before the clock, a handful of tiny requests check the target against what the trace uses.

Pure checks over facts (what the planned rows need, what each answer said) and one blocking I/O layer
(`_Prober`); every request goes to --target only, carries `X-Request-Id: llmreplay-preflight-<n>`
and a bounded timeout. A refusal that would make the replay meaningless is one BadInput line.
"""

from __future__ import annotations

import dataclasses
import http.client
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from llmreplay import __version__
from llmreplay.bounded_read import AnswerTooLarge, CrossOriginRedirect, error_body, fetch
from llmreplay.engines import BY_NAME, Engine
from llmreplay.errors import BadInput
from llmreplay.probe_ids import PROBE_ID_PREFIX, probe_headers
from llmreplay.redaction import scrubbed_excerpt, secret_values
from llmreplay.wire.dialects import api_body
from llmreplay.wire.endpoints import ENDPOINTS, REPLAY_PATHS
from llmreplay.wire.error_object import error_text
from llmreplay.wire.response import ResponseShape, summarize_json, summarize_stream
from replayer.config import ReplayConfig
from replayer.plan.request_builder import length_fields, sent_model, tool_choice_field
from replayer.plan.responses_state import (
    EXPANDED,
    PREVIOUS_RESPONSE,
    sending_modes,
    state_summary,
    summary_line,
)
from replayer.target import TargetInfo, lookup

PURPOSE = "preflight"
# X-Request-ID of every preflight request (`llmreplay-probe-preflight-<n>`): logs can drop them
REQUEST_ID_PREFIX = f"{PROBE_ID_PREFIX}{PURPOSE}-"
FORCED_TOKENS = 6  # the length the forcing check asks for
CACHE_SENTENCES = 48  # ~700 tokens in common vocabularies: several prefix-cache blocks (vLLM's are 128)
MAX_TIMEOUT_S = 10.0  # a preflight request's whole answer takes at most this long (or --read-timeout)
OK, WARN, STOP, UNVERIFIED = "ok", "warn", "stop", "unverified"
# What engines answer to a request they will not serve as asked (vLLM, SGLang, llama.cpp 400; TGI 422).
# Other statuses (401, 404, 429, 5xx) say nothing about the feature tried: unverified, never a stop.
REFUSALS = (400, 422)


@dataclass(frozen=True, slots=True)
class Use:
    """One thing the trace asks of the engine (a feature and its variant) and how many planned requests do."""

    feature: str  # a FEATURES name
    variant: str
    requests: int


@dataclass(frozen=True, slots=True)
class TraceNeeds:
    """What the planned requests ask of the target, computed from the trace's columns."""

    requests: int  # planned requests (--scale copies included)
    generating: (
        int  # of them, requests whose answer generates tokens (chat, completions, responses, messages)
    )
    endpoint: str  # the generating endpoint most of them use: the probes' endpoint
    model: str | None
    request_tokens: np.ndarray  # prompt + output of each planned request
    uses: tuple[Use, ...]
    responses_state: dict | None = None  # chained turns: the mode and how each is sent (responses_state)


@dataclass(frozen=True, slots=True)
class Answer:
    """What one preflight request got: an HTTP status (None: no answer at all) and the answer read."""

    status: int | None
    shape: ResponseShape | None = None  # a readable 200 answer
    error: str = ""  # otherwise why not, one line: the server's message or the transport failure

    @property
    def refused(self) -> bool:
        return self.status in REFUSALS

    def why(self) -> str:
        return f"HTTP {self.status}: {self.error}" if self.status is not None else self.error


@dataclass(frozen=True, slots=True)
class Check:
    name: str  # "length", "cached_tokens", "context", or "<feature>:<variant>"
    outcome: str  # OK, WARN, STOP or UNVERIFIED
    detail: str
    fix: str | None = None


@dataclass(frozen=True, slots=True)
class Preflight:
    """What the preflight found; run.json keeps it under `preflight`."""

    engine: str
    engine_from: str
    version: str | None  # as the engine states it; None: it states none
    version_from: str | None
    context_tokens: int | None
    requests: int  # planned requests the counts below refer to
    checks: tuple[Check, ...]
    requests_sent: int

    @property
    def stop(self) -> Check | None:
        return next((c for c in self.checks if c.outcome == STOP), None)

    def lines(self) -> list[str]:
        engine = BY_NAME[self.engine].title
        version = f"{self.version} (GET {self.version_from})" if self.version else "version not stated"
        head = (
            f"preflight: {engine}, {version}; engine from {self.engine_from}; {self.requests_sent} requests"
        )
        rows = [
            f"  {c.outcome:<10} {c.name}: {c.detail}" + (f"; fix: {c.fix}" if c.fix else "")
            for c in self.checks
        ]
        return [head, *rows]

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclass(frozen=True, slots=True)
class Feature:
    """A request feature the trace may use: where it is seen in the columns, and the tiny request that tries it."""

    name: str  # also the key of an engine row's refusal_fixes
    variants: Callable[[pa.Table], list[tuple[str, pa.Array]]]  # (variant, mask over trace rows)
    body: Callable[[str, Engine], dict]  # what the probe adds for a variant
    stops_on_any: bool  # refused while any request uses it: stop (otherwise only when every request does)
    endpoint: str | None = None  # the endpoint it exists on; None: the probes' endpoint


_TOOL = {
    "type": "function",
    "function": {
        "name": "preflight_tool",
        "description": "Answers a preflight question.",
        "parameters": {"type": "object", "properties": {"input": {"type": "string"}}},
    },
}
_SCHEMA = {"name": "preflight", "schema": {"type": "object", "properties": {"answer": {"type": "string"}}}}
_FORMATS = {
    "json_object": {"type": "json_object"},
    "json_schema": {"type": "json_schema", "json_schema": _SCHEMA},
}
UNSET = "unset"  # a tool request that recorded no tool_choice (the engine's default applies)
CHAT_LIKE = ("chat_completions", "completions")
GENERATING = tuple(e.name for e in ENDPOINTS if e.generates)  # the probes' endpoint: the commonest


def _by_value(column: pa.ChunkedArray, where: pa.Array) -> list[tuple[str, pa.Array]]:
    values = pc.fill_null(column, UNSET)
    return [
        (str(v), pc.and_(where, pc.equal(values, v))) for v in pc.unique(values.filter(where)).to_pylist()
    ]


def _tool_variants(table: pa.Table) -> list[tuple[str, pa.Array]]:
    chat = pc.equal(table.column("endpoint"), "chat_completions")
    return _by_value(table.column("tool_choice"), pc.and_(chat, pc.greater(table.column("tools_count"), 0)))


def _chat_like(table: pa.Table) -> pa.Array:
    """Rows of the chat and completions APIs, whose feature fields the probes below spell."""
    return pc.is_in(table.column("endpoint"), pa.array(list(CHAT_LIKE)))


def _format_variants(table: pa.Table) -> list[tuple[str, pa.Array]]:
    kinds = table.column("structured_output")
    return _by_value(kinds, pc.and_(_chat_like(table), pc.is_in(kinds, pa.array(list(_FORMATS)))))


def _n_variants(table: pa.Table) -> list[tuple[str, pa.Array]]:
    n = table.column("n")
    return _by_value(
        pc.cast(n, pa.string()), pc.and_(_chat_like(table), pc.fill_null(pc.greater(n, 1), False))
    )


def _stream_variants(table: pa.Table) -> list[tuple[str, pa.Array]]:
    streamed = table.column("stream")
    return [("with usage", streamed)] if pc.any(streamed).as_py() else []


def _tool_body(variant: str, engine: Engine) -> dict:
    choice = tool_choice_field(None if variant == UNSET else variant, [_TOOL])
    return {"tools": [_TOOL], **({} if choice is None else {"tool_choice": choice})}


def _stream_body(variant: str, engine: Engine) -> dict:
    # stream_options is chat's; the Responses and Messages streams carry their usage unasked
    usage = {"stream_options": {"include_usage": True}} if "include_usage" in engine.stream_usage else {}
    return {"stream": True, **usage}


# What the trace may ask of an engine beyond a plain request: adding one is adding a row.
FEATURES: tuple[Feature, ...] = (
    Feature("tools", _tool_variants, _tool_body, stops_on_any=True, endpoint="chat_completions"),
    Feature("response_format", _format_variants, lambda v, e: {"response_format": _FORMATS[v]}, False),
    Feature("n", _n_variants, lambda v, e: {"n": int(v)}, stops_on_any=False),
    Feature("stream", _stream_variants, _stream_body, stops_on_any=False),
)
_FEATURES = {feature.name: feature for feature in FEATURES}


def trace_needs(table: pa.Table, record_index: np.ndarray, model: str | None) -> TraceNeeds:
    """The planned requests' needs from the trace table (`record_index`: each planned request's row)."""
    record_index = np.asarray(record_index, np.int64)
    output = pc.coalesce(table.column("completion_tokens"), table.column("max_tokens"), 0)
    tokens = pc.add(pc.fill_null(table.column("prompt_tokens"), 0), output).to_numpy().astype(np.int64)
    copies = np.bincount(record_index, minlength=table.num_rows)  # planned requests of each row (0: none)

    def count(mask) -> int:
        return int(copies[np.asarray(pc.fill_null(mask, False).to_numpy(zero_copy_only=False))].sum())

    endpoints = table.column("endpoint")
    per_endpoint = {name: count(pc.equal(endpoints, name)) for name in GENERATING}
    uses = tuple(
        Use(feature.name, variant, n)
        for feature in FEATURES
        for variant, mask in feature.variants(table)
        if (n := count(mask))  # variants of rows never planned count 0
    )
    return TraceNeeds(
        requests=len(record_index),
        generating=sum(per_endpoint.values()),
        endpoint=max(GENERATING, key=lambda name: per_endpoint[name]),  # ties: chat first
        model=model or _commonest(table.column("model").filter(pa.array(copies > 0))),
        request_tokens=tokens[record_index],
        uses=uses,
    )


def _commonest(models: pa.ChunkedArray) -> str | None:
    counts = pc.value_counts(pc.drop_null(models)).to_pylist()
    return max(counts, key=lambda item: item["counts"])["values"] if counts else None


def chained_turns_summary(table: pa.Table, record_index, mode: str) -> dict | None:
    """How the planned turns with server-side state will be sent (None: the trace has none). A turn's
    previous one is the planned row before it in its session by (turn_index, arrival), as the plan
    links them; each --scale copy is sent like its original."""
    if (
        "server_state" not in table.column_names
        or not pc.any(pc.is_valid(table.column("server_state"))).as_py()
    ):
        return None
    copies = np.bincount(np.asarray(record_index, np.int64), minlength=table.num_rows)
    rows = np.flatnonzero(copies)
    sub = table.take(pa.array(rows)).select(
        ["request_id", "session_id", "turn_index", "arrival_time", "parent_request_id", "server_state"]
    )
    order = pc.sort_indices(
        sub, [("session_id", "ascending"), ("turn_index", "ascending"), ("arrival_time", "ascending")]
    ).to_numpy()
    ids, sessions = sub.column("request_id").to_pylist(), sub.column("session_id").to_pylist()
    previous: list = [None] * len(ids)
    for before, at in zip(order[:-1].tolist(), order[1:].tolist(), strict=True):
        if sessions[at] is not None and sessions[at] == sessions[before]:
            previous[at] = ids[before]
    states, parents = sub.column("server_state").to_pylist(), sub.column("parent_request_id").to_pylist()
    modes = sending_modes(states, parents, previous, mode)
    weights = copies[rows].tolist()
    weighted = [m for m, w in zip(modes, weights, strict=True) for _ in range(w)]
    not_previous = sum(
        w
        for m, w, s, p, prev in zip(modes, weights, states, parents, previous, strict=True)
        if m == EXPANDED and s == PREVIOUS_RESPONSE and p != prev
    )
    return state_summary(mode, weighted, not_previous)


# --- the checks: pure functions of the facts ---------------------------------------------------------


def check_length(
    answer: Answer, engine: Engine, wanted: int = FORCED_TOKENS, endpoint: str = "chat_completions"
) -> Check:
    """The forcing request came back with exactly `wanted` completion tokens."""
    forcing = engine.length_forcing(endpoint)
    fields = ", ".join(name for name, _ in forcing)
    if answer.refused:  # a warning, like any length not forced: the replay's answers will tell
        sent = f"a {wanted}-token request" + (f" with {fields}" if fields else "")
        fix = "check --engine (--engine openai sends no forcing field)" if fields else None
        return Check("length", WARN, f"{sent} is refused: {answer.why()}", fix)
    if not forcing:
        where = "" if endpoint in CHAT_LIKE else f" on {REPLAY_PATHS[endpoint]}"
        why = f"{engine.title} cannot force output length{where}: answers may stop early at EOS"
        return Check("length", WARN, why)
    got = answer.shape.completion_tokens if answer.shape else None
    if got is None:
        return Check("length", UNVERIFIED, answer.why() if answer.shape is None else "no usage in the answer")
    if got == wanted:
        return Check("length", OK, f"forced: {got} of {wanted} tokens with {fields}")
    return Check(
        "length", WARN, f"asked for {wanted} tokens with {fields}, got {got}: lengths may miss the trace's"
    )


def check_cached(repeat: Answer | None, engine: Engine) -> Check:
    """A prompt sent twice reports cached tokens the second time (None: the row says it reports none)."""
    if repeat is None:
        return Check(
            "cached_tokens", WARN, f"{engine.title} reports no cached prompt tokens: cache hits go unseen"
        )
    if repeat.shape is None:
        return Check("cached_tokens", UNVERIFIED, repeat.why())
    cached, prompt = repeat.shape.cached_tokens, repeat.shape.prompt_tokens
    if cached:
        return Check("cached_tokens", OK, f"reported: {cached} of {prompt} prompt tokens cached on a repeat")
    fix = f"start the server with {engine.cached_tokens_flag}" if engine.cached_tokens_flag else None
    return Check("cached_tokens", WARN, f"none reported on a repeated prompt ({engine.cached_tokens})", fix)


def check_context(context_tokens: int | None, request_tokens: np.ndarray) -> Check:
    """How many planned requests need more than the context (prompt + output): they will be answered 400."""
    longest = int(request_tokens.max()) if len(request_tokens) else 0
    if context_tokens is None:
        return Check(
            "context",
            UNVERIFIED,
            f"the target states no context length; the longest request needs {longest:,}",
        )
    over = int((request_tokens > context_tokens).sum())
    if not over:
        return Check("context", OK, f"{context_tokens:,} tokens; the longest request needs {longest:,}")
    detail = (
        f"{over:,} of {len(request_tokens):,} requests need more than {context_tokens:,} tokens "
        f"(up to {longest:,}): they will be answered 400"
    )
    fix = f"a target with a context of {longest:,} tokens"
    return Check("context", STOP if over == len(request_tokens) else WARN, detail, fix)


def check_feature(use: Use, answer: Answer, engine: Engine, requests: int) -> Check:
    """One tiny request using the feature: accepted, refused (with the server flag that fixes it), or unknown."""
    feature = _FEATURES[use.feature]
    name, share = f"{use.feature}:{use.variant}", f"{use.requests:,} of {requests:,} requests"
    if answer.refused:
        stops = feature.stops_on_any or use.requests >= requests
        fix = dict(engine.refusal_fixes).get(use.feature)
        return Check(
            name,
            STOP if stops else WARN,
            f"refused ({share} use it): {answer.why()}",
            fix and f"start the server with {fix}",
        )
    if answer.shape is None:
        return Check(name, UNVERIFIED, f"{share}; {answer.why()}")
    if use.feature == "stream" and answer.shape.completion_tokens is None:
        return Check(
            name, WARN, f"accepted, but no usage in the stream ({share}): lengths counted by the client"
        )
    return Check(name, OK, f"accepted ({share})")


# --- the I/O layer -----------------------------------------------------------------------------------


class _Prober:
    """Sends the preflight requests one at a time; after one got no HTTP answer, the rest are not sent."""

    def __init__(self, config: ReplayConfig, base_url: str):
        self.base_url = base_url
        self.timeout_s = min(MAX_TIMEOUT_S, config.read_timeout_ns / 1e9)  # connect and each read
        self.headers = {"User-Agent": f"llmreplay/{__version__}", "Content-Type": "application/json"}
        if config.api_key:
            self.headers["Authorization"] = f"Bearer {config.api_key}"
        self.headers.update(config.sent_headers)
        self.secrets = secret_values(config.sent_headers, config.api_key)
        self.sent = 0
        self.gone: str | None = None

    def send(self, endpoint: str, body: dict) -> Answer:
        if self.gone is not None:
            return Answer(None, error=f"not sent: {self.gone}")
        self.sent += 1
        headers = {**self.headers, **probe_headers(PURPOSE, self.sent)}
        request = urllib.request.Request(
            self.base_url + REPLAY_PATHS[endpoint], orjson.dumps(body), headers, method="POST"
        )
        try:
            response, raw = fetch(request, self.timeout_s)
            status = response.status
        except AnswerTooLarge as exc:
            raise BadInput(str(exc)) from None
        except CrossOriginRedirect as exc:
            raise BadInput(f"{request.full_url}: HTTP {exc.code} {exc.reason}") from None
        except urllib.error.HTTPError as exc:
            status, raw = exc.code, error_body(exc, self.timeout_s)
        except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError) as exc:
            reason = getattr(exc, "reason", None) or exc
            self.gone = f"the target did not answer preflight request {self.sent} ({self._line(str(reason))})"
            return Answer(None, error=self.gone)
        return self._read(status, raw, endpoint, body.get("stream", False))

    def _read(self, status: int, raw: bytes, endpoint: str, stream: bool) -> Answer:
        try:
            payload = orjson.loads(raw) if not stream or status != 200 else None
        except orjson.JSONDecodeError:
            return Answer(status, error=self._line(raw.decode("utf-8", "replace")) or "an empty answer")
        if status != 200:
            said = (
                payload.get("error") or payload.get("detail") or payload
                if isinstance(payload, dict)
                else payload
            )
            return Answer(status, error=self._line(error_text(said)))
        if stream:
            events = [(0, line[5:].strip()) for line in raw.splitlines() if line.startswith(b"data:")]
            shape = summarize_stream(events)
        else:
            shape = summarize_json(raw, endpoint)
        if shape.stream_error:
            return Answer(status, error="an error object instead of an answer")
        return Answer(status, shape)

    def _line(self, text: str) -> str:
        text = scrubbed_excerpt(" ".join(text.split()), self.secrets)
        return text if len(text) <= 160 else text[:157] + "..."


def _request(
    needs: TraceNeeds, engine: Engine, wanted: int, text: str, endpoint: str | None = None, **extra
) -> tuple[str, dict]:
    """(endpoint, body) of one tiny request, its length forced as the replay's are."""
    endpoint = endpoint or needs.endpoint
    api = api_body(endpoint)
    prompt = api.spell([("user", text)])
    if extra.get("stream") and not api.asks_usage:
        extra = {"stream": True}  # its stream carries its usage unasked
    grammar = api.under_grammar(extra)
    forced = length_fields(engine.name, wanted, grammar=grammar, endpoint=endpoint)
    return endpoint, {"model": needs.model, **prompt, **extra, **forced}


def _cache_text(context_tokens: int | None) -> str:
    sentences = (
        CACHE_SENTENCES if context_tokens is None else max(4, min(CACHE_SENTENCES, context_tokens // 40))
    )
    return " ".join(
        f"Sentence {i} of the preflight reads the same on both requests." for i in range(sentences)
    )


def _probe(prober: _Prober, needs: TraceNeeds, engine: Engine, context_tokens: int | None) -> list[Check]:
    """The checks that send requests: length first, then cache, then features. The length request is
    the plain one every other adds to: when it got no answer, the others would tell nothing."""
    first = prober.send(*_request(needs, engine, FORCED_TOKENS, "Say hello."))
    length = check_length(first, engine, endpoint=needs.endpoint)
    if first.shape is None:
        return [length]
    repeat = None
    if engine.cached_tokens:
        text = _cache_text(context_tokens)
        prober.send(*_request(needs, engine, 1, text))
        repeat = prober.send(*_request(needs, engine, 1, text))
    checks = [length, check_cached(repeat, engine)]
    for use in needs.uses:
        feature = _FEATURES[use.feature]
        endpoint, body = _request(
            needs, engine, 2, "Say hello.", feature.endpoint, **feature.body(use.variant, engine)
        )
        checks.append(check_feature(use, prober.send(endpoint, body), engine, needs.requests))
    return checks


def run_preflight(config: ReplayConfig, target: TargetInfo, needs: TraceNeeds) -> Preflight:
    """Ask the target what it is and try what the trace uses; the requests go to --target only."""
    engine = BY_NAME[target.engine]
    version = lookup(target.base_url, config.api_key, engine.version) if engine.version else None
    version = str(version)[:80] if isinstance(version, str | int | float) and str(version) else None
    context = (
        lookup(target.base_url, config.api_key, engine.context_tokens) if engine.context_tokens else None
    )
    context = context if isinstance(context, int) and not isinstance(context, bool) and context > 0 else None
    prober = _Prober(config, target.base_url)
    checks = [check_context(context, needs.request_tokens)]
    if needs.responses_state is not None:
        checks.append(Check("responses_state", OK, summary_line(needs.responses_state)))
    if needs.generating and needs.model:
        checks = _probe(prober, needs, engine, context) + checks
    return Preflight(
        engine=engine.name,
        engine_from=target.detected_from,
        version=version,
        version_from=engine.version.path if version is not None else None,
        context_tokens=context,
        requests=needs.requests,
        checks=tuple(checks),
        requests_sent=prober.sent,
    )


def preflight_target(
    config: ReplayConfig, target: TargetInfo, table: pa.Table, record_index, console=None
) -> Preflight | None:
    """The preflight of a replay (None with --skip-preflight), printed unless --quiet; a refusal that would
    make the replay meaningless is BadInput, one line naming the fix."""
    if config.skip_preflight:
        return None
    needs = trace_needs(table, record_index, config.model)
    default = target.models[0] if target.models else None
    needs = dataclasses.replace(
        needs,
        model=sent_model(needs.model, None, config.model_map, default),
        responses_state=chained_turns_summary(table, record_index, config.responses_state),
    )
    found = run_preflight(config, target, needs)
    stop = found.stop
    if stop is not None:
        fix = f"; fix: {stop.fix}" if stop.fix else ""
        raise BadInput(f"preflight: {stop.name}: {stop.detail}{fix} (or --skip-preflight)")
    if console is not None and not config.quiet:
        for line in found.lines():
            console.print(line, markup=False, highlight=False, soft_wrap=True)
    return found
