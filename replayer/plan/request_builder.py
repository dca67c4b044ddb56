"""Trace row -> HTTP request (path + pre-serialised JSON body), built before the clock starts.

Content traces send their recorded content; shape traces get synthesized text (prompt_synthesis).
The output length is forced to the recorded completion length with the engine row's fields
(llmreplay.engines).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import orjson

from llmreplay.engines import BY_NAME, FLAG, FLOOR
from llmreplay.errors import BadInput
from llmreplay.trace_format import TraceRecord
from llmreplay.wire.api_body import ApiBody
from llmreplay.wire.chat_api import chat_view, sent_tool_choice
from llmreplay.wire.dialects import api_body
from llmreplay.wire.endpoints import REPLAY_PATHS
from replayer.plan.api_request import load_column, tagged
from replayer.plan.arrays import PlannedRequest
from replayer.plan.phases import prompt_copy
from replayer.plan.prompt_fit import PromptFitter
from replayer.plan.prompt_synthesis import BlockSpeller, copy_nonce
from replayer.plan.sent_turns import SentTurn, continued, sent_and_marked

ENDPOINT_PATHS = REPLAY_PATHS  # llmreplay.wire.endpoints: a row there makes an endpoint replayable
CANCEL_HEADROOM_TOKENS = 16
# Messages requires max_tokens: a row that recorded neither an output nor a limit gets this one
REQUIRED_LIMIT_TOKENS = 4096
# Largest prompt a body is built for: beyond any engine's context (a synthesized body of this many
# tokens is ~50 MB). Checked per row before the clock (replayer.plan.bounds) and again here.
MAX_PROMPT_TOKENS = 10_000_000


@dataclass(frozen=True, slots=True)
class BuiltRequest:
    path: str
    body: bytes
    stream: bool
    requested_completion_tokens: int | None
    turn: SentTurn | None = None  # a chat turn as the session's next turn continues it


@dataclass(frozen=True, slots=True)
class BuildOptions:
    engine: str  # resolved: a name in llmreplay.engines
    model: str | None  # --model: overrides every row
    default_model: str | None  # the target's first model, for rows without one
    seed: int = 0
    fit_lengths: bool = False  # recorded content is respelled from its shape to the target's counts
    model_map: tuple[tuple[str, str], ...] = ()  # --model-map (recorded, sent); "*": every row
    responses_state: str = "chain"  # --responses-state (replayer.plan.responses_state)
    loop_stride: int = 0  # --soak: plan copy = loop * loop_stride + copy (replayer.plan.phases)
    soak_keep_sharing: bool = False  # every loop spells its prompts as loop 0 does

    def model_for(self, recorded: str | None) -> str | None:
        return sent_model(recorded, self.model, self.model_map, self.default_model)


def sent_model(
    recorded: str | None, model: str | None, model_map: tuple[tuple[str, str], ...], default: str | None
) -> str | None:
    """The model a row recorded with `recorded` is sent to: --model, else its --model-map name (or the
    `*` one), else the recorded name, else the target's first model (`default`)."""
    mapped = dict(model_map)
    return model or mapped.get(recorded or "") or mapped.get("*") or recorded or default


def requested_tokens(record: TraceRecord, plan: PlannedRequest) -> int | None:
    """max_tokens to send: the recorded output length, or room to run past a mirrored cancel."""
    if plan.cancel_after_tokens is not None:
        floor = plan.cancel_after_tokens * 2 + CANCEL_HEADROOM_TOKENS
        return max(record.max_tokens or 0, floor)
    if record.completion_tokens is not None:
        return max(1, record.completion_tokens)
    return record.max_tokens


def build_request(
    record: TraceRecord,
    plan: PlannedRequest,
    options: BuildOptions,
    speller: BlockSpeller | None,
    fitter: PromptFitter | None = None,
    sending: int = 0,
    history: Sequence[TraceRecord] = (),
    previous: SentTurn | None = None,
) -> BuiltRequest:
    """The request of one planned row, built the way its API's row names (BUILDERS); with a
    `fitter`, synthesized prompts are fitted to the target's own count (replayer.plan.prompt_fit).
    `sending`, `history`: a chained Responses turn's way of sending and the ancestors it is expanded
    with (replayer.plan.responses_state). `previous`: the session's previous chat turn as sent, which
    this one continues (replayer.plan.sent_turns)."""
    path, model = _path_and_model(record, options)
    copy = prompt_copy(plan.copy_index, options.loop_stride, options.soak_keep_sharing)
    nonce = copy_nonce(copy, options.seed)
    # A copy is kept out of the original's prefix cache by `cache_salt` where the engine takes it
    # (no prompt token added); elsewhere recorded content gets a tag in front.
    salted = bool(nonce) and BY_NAME[options.engine].cache_salt
    content = _Content(
        record, plan, speller, nonce, tag_copies=not salted, respell=options.fit_lengths, copy=copy
    )
    salt = f"llmreplay-copy-{copy}-{nonce:016x}" if salted else None
    row = api_body(record.endpoint)
    build = _Build(record, plan, options, row, content, path, model, salt, fitter, sending, history, previous)
    return BUILDERS[row.builder](build)


@dataclass(frozen=True, slots=True)
class _Build:
    """One planned row's request being built, with what every way of building may use."""

    record: TraceRecord
    plan: PlannedRequest
    options: BuildOptions
    row: ApiBody
    content: _Content
    path: str
    model: str
    salt: str | None  # cache_salt of a copy, where the engine takes it
    fitter: PromptFitter | None
    sending: int
    history: Sequence[TraceRecord]
    previous: SentTurn | None

    def start(self) -> dict:
        return {"model": self.model, **({"cache_salt": self.salt} if self.salt else {})}

    def fit(self) -> bool:
        """The prompt is synthesized and fitted to the target's count."""
        return self.fitter is not None and not self.content.has_content and self.record.prompt_tokens is not None


def _embedding_request(b: _Build) -> BuiltRequest:
    body = {"model": b.model, b.row.prompt_field: b.content.prompt_text()}
    return BuiltRequest(b.path, _json_bytes(body), False, None)


def _chat_request(b: _Build) -> BuiltRequest:
    body = b.start()
    turn = _add_chat_fields(body, b.record, b.plan, b.content, b.fitter, b.previous, b.fit())
    wanted = _add_output_fields(body, b.record, b.plan, b.options, b.content, b.row)
    return BuiltRequest(b.path, _json_bytes(body), b.record.stream, wanted, turn)


def _prompt_request(b: _Build) -> BuiltRequest:
    body = b.start()
    if b.fit():
        body[b.row.prompt_field] = b.fitter.fit_prompt(b.record.prompt_tokens, b.content.synthesized_prompt)
    else:
        body[b.row.prompt_field] = b.content.prompt()
    wanted = _add_output_fields(body, b.record, b.plan, b.options, b.content, b.row)
    return BuiltRequest(b.path, _json_bytes(body), b.record.stream, wanted)


def _spelled_request(b: _Build) -> BuiltRequest:
    body = b.start()
    return _api_request(b.record, b.plan, b.options, b.content, body, b.path, b.fitter, b.sending, b.history)


# llmreplay.wire.api_body.BUILDERS: an API's row names its way
BUILDERS = {
    "chat": _chat_request,
    "prompt": _prompt_request,
    "embedding": _embedding_request,
    "spelled": _spelled_request,
}


def _path_and_model(record: TraceRecord, options: BuildOptions) -> tuple[str, str]:
    """The target path of the row's endpoint and the model it is sent to; refused (one line) when the
    endpoint cannot be replayed or no model is known."""
    path = ENDPOINT_PATHS.get(record.endpoint)
    if path is None:
        raise BadInput(f"request {record.request_id}: endpoint {record.endpoint!r} cannot be replayed")
    model = options.model_for(record.model)
    if not model:
        raise BadInput(f"request {record.request_id}: no model in the trace; pass --model")
    return path, model


def _add_chat_fields(body, record, plan, content, fitter, previous, fit) -> SentTurn | None:
    """A chat body's messages (continuing `previous`; fitted to the target's count when `fit`, else
    measured), then tools and tool_choice. Returns the turn as sent when a next turn continues it."""
    tools = content.tools()
    answers: dict[int, int] = {}
    if fit:
        layout = (tuple(m.role for m in record.messages) or ("user",), len(tools or ()))

        def spell(correction):
            nonlocal answers
            messages, answers = continued(content.messages(correction), previous)
            return messages, tools

        body["messages"] = fitter.fit_chat(record.prompt_tokens, layout, spell)[0]
    else:
        body["messages"], answers = continued(content.messages(), previous)
        if fitter is not None and record.prompt_tokens is not None:
            fitter.measure_chat(record.prompt_tokens, body["messages"], tools)
    followed = plan.next_index is not None
    body["messages"], turn = sent_and_marked(body["messages"], answers, followed)
    if tools:
        body["tools"] = tools
        choice = tool_choice_field(record.tool_choice, tools)
        if choice is not None:
            body["tool_choice"] = choice
    return turn


def _add_output_fields(body, record, plan, options, content, row: ApiBody) -> int | None:
    """A chat or completions body's format, streaming, length limit and forcing fields (read after
    the prompt's fields: a grammar changes them), then the recorded sampling. Returns the output
    tokens asked for."""
    response_format = content.response_format(row)
    if response_format is not None:
        body.update(row.format_fields(response_format))
    body["stream"] = record.stream
    if record.stream and row.asks_usage:
        body["stream_options"] = {"include_usage": True}
    wanted = requested_tokens(record, plan)
    if wanted is not None:
        cancels = plan.cancel_after_tokens is not None
        grammar = row.under_grammar(body)
        body.update(length_fields(options.engine, wanted, cancels, grammar, row.endpoint))
    for name in row.sampling:
        value = getattr(record, name)
        if value is not None:
            body[name] = value
    return wanted


def length_fields(
    engine: str, wanted: int, cancels: bool = False, grammar: bool = False, endpoint: str = "chat_completions"
) -> dict:
    """The endpoint's length limit and the engine row's length-forcing fields there for `wanted` output
    tokens (only the limit under a grammar where the row says forcing fails there)."""
    fields: dict = {api_body(endpoint).limit_field: wanted}
    row = BY_NAME[engine]
    if grammar and not row.forces_length_under_grammar:
        return fields
    for name, kind in row.length_forcing(endpoint):
        if kind == FLOOR and cancels:
            continue  # the engine must be free to stop where the recorded client hung up
        fields[name] = True if kind == FLAG else wanted
    return fields


def _api_request(record, plan, options, content, body, path, fitter, sending, history) -> BuiltRequest:
    """A Responses or Messages request (its dialect's ApiBody, llmreplay.wire): the API's own fields, the
    placeholder of a chained turn, its length limit and forcing fields, the sampling it has."""
    from llmreplay.wire.responses_api import PREVIOUS_RESPONSE_PLACEHOLDER
    from replayer.plan.responses_state import CHAINED

    row = api_body(record.endpoint)
    chain_mode = options.responses_state == "chain"
    body.update(_api_prompt(row, record, content, fitter, sending, history, chain_mode))
    if sending == CHAINED:
        body["previous_response_id"] = PREVIOUS_RESPONSE_PLACEHOLDER
    body["stream"] = record.stream
    wanted = requested_tokens(record, plan)
    if wanted is None and row.limit_required:
        wanted = REQUIRED_LIMIT_TOKENS
    if wanted is not None:
        cancels = plan.cancel_after_tokens is not None
        grammar = row.under_grammar(body)
        body.update(length_fields(options.engine, wanted, cancels, grammar, record.endpoint))
    for name in row.sampling:
        value = getattr(record, name)
        if value is not None:
            body[name] = value
    return BuiltRequest(path, _json_bytes(body), record.stream, wanted)


def _api_prompt(row, record, content, fitter, sending, history, chain_mode=True) -> dict:
    """Recorded content as it was sent, or the shape spelled in the API's shape and fitted to the
    target's count. A chained turn sends its own input only; it is fitted on the count of what the
    target then holds: its ancestors' turns as they were sent, then its own (how vLLM builds it)."""
    from replayer.plan import api_request
    from replayer.plan.responses_state import CHAINED, PREVIOUS_RESPONSE

    sent_history = () if sending == CHAINED else history
    if content.has_content:
        if record.content_messages is None:
            raise BadInput(f"request {record.request_id}: a {record.endpoint} row without content_messages")
        fields = api_request.content_fields(row, record, content._tag(), sent_history)
        if fitter is not None and record.prompt_tokens is not None and sending != CHAINED:
            fitter.measure_chat(record.prompt_tokens, *api_request.counted_view(record.endpoint, fields))
        return fields
    speller = content._need_speller()
    tools = api_request.synthesized_tools(row, speller, record, content.nonce)

    def layout(turn) -> tuple:
        chained = chain_mode and turn.server_state == PREVIOUS_RESPONSE
        return (
            (turn.endpoint, *(("chained",) if chained else ()), *(m.role for m in turn.messages)),
            turn.tools_count,
        )

    def sent_correction(turn) -> int:
        return fitter.stats.corrections.get(layout(turn), 0) if fitter is not None else 0

    def spell(correction: int) -> tuple:
        nonce = content.nonce
        spelled = api_request.spelled_turns(speller, record, nonce, correction, sent_history, sent_correction)
        held = spelled
        if sending == CHAINED:
            held = api_request.spelled_turns(speller, record, nonce, correction, history, sent_correction)
        return spelled, row.chat(held), api_request.chat_tools(tools)

    if fitter is not None and record.prompt_tokens is not None and (history or sending != CHAINED):
        spelled = fitter.fit_api(record.prompt_tokens, layout(record), spell)[0]
    else:
        spelled = spell(0)[0]
    return api_request.shape_fields(row, speller, record, content.nonce, spelled, tools)


def _json_bytes(obj) -> bytes:
    """JSON as a right-sized bytes object: orjson returns its growth buffer (measured with orjson
    3.13: a 4 KB body held a 32 KB allocation), and every body is held until the run starts."""
    return bytes(memoryview(orjson.dumps(obj)))


def tool_choice_field(recorded: str | None, tools: list) -> object:
    """A chat request's `tool_choice` for the trace's value (None: not sent); "function" names the
    first tool."""
    if recorded is None:
        return None
    return sent_tool_choice(recorded, tools[0]["function"]["name"] if recorded == "function" else "")


class _Content:
    """Recorded content when the trace has it, else text synthesized from the shape."""

    def __init__(
        self,
        record: TraceRecord,
        plan: PlannedRequest,
        speller: BlockSpeller | None,
        nonce: int,
        tag_copies: bool = True,
        respell: bool = False,
        copy: int | None = None,  # the copy whose prompts are sent (--soak-keep-sharing); None: the plan's
    ):
        self.record = record
        self.plan = plan
        self.copy = plan.copy_index if copy is None else copy
        self.speller = speller
        self.nonce = nonce
        self.tag_copies = tag_copies
        self.has_content = not respell and (
            record.content_messages is not None or record.content_prompt is not None
        )
        if not self.has_content:
            _check_synthesized_size(record)

    def _need_speller(self) -> BlockSpeller:
        if self.speller is None:
            raise BadInput(
                f"request {self.record.request_id}: a shape-only row needs prompt synthesis, "
                "which needs llmreplay.exact_text (not available)"
            )
        return self.speller

    def _tag(self) -> str:
        # Copies of recorded content get a per-copy tag in front, so they share no cache prefix with
        # the original (costs a few prompt tokens).
        return f"[copy {self.copy}:{self.nonce & 0xFFFFFF:06x}] " if self.nonce and self.tag_copies else ""

    def messages(self, correction: int = 0) -> list:
        if self.has_content and self.record.content_messages is not None:
            messages = load_column(self.record, "content_messages", self.record.content_messages, list)
            return tagged(messages, self._tag())
        speller = self._need_speller()
        rec = self.record
        spelled = speller.messages(
            rec.messages, rec.prompt_tokens, rec.prefix_block_hashes, rec.request_id, self.nonce, correction
        )
        return chat_view(spelled)

    def prompt(self) -> object:
        if self.has_content and self.record.content_prompt is not None:
            prompt = load_column(self.record, "content_prompt", self.record.content_prompt, (str, list))
            return self._tag() + prompt if isinstance(prompt, str) else prompt
        return self.prompt_text()

    def prompt_text(self) -> str:
        if self.has_content and self.record.content_prompt is not None:
            prompt = self.prompt()
            return prompt if isinstance(prompt, str) else orjson.dumps(prompt).decode()
        if self.has_content and self.record.content_messages is not None:
            return " ".join(str(m.get("content", "")) for m in self.messages() if isinstance(m, dict))
        return self.synthesized_prompt()

    def synthesized_prompt(self, correction: int = 0) -> str:
        rec = self.record
        speller = self._need_speller()
        spelled = speller.messages(
            rec.messages, rec.prompt_tokens, rec.prefix_block_hashes, rec.request_id, self.nonce, correction
        )
        return "".join(text for _, text in spelled)

    def tools(self) -> list | None:
        rec = self.record
        if self.has_content and rec.content_tools is not None:
            return load_column(rec, "content_tools", rec.content_tools, list) or None
        if rec.tools_count <= 0 or self.has_content:
            return None
        speller = self._need_speller()
        per_tool = max(1, rec.tool_definition_tokens // rec.tools_count - 20)  # ~20 tokens of JSON frame
        return [
            {
                "type": "function",
                "function": {
                    "name": f"tool_{i}",
                    "description": speller.text(per_tool, f"{rec.request_id}/tool{i}", self.nonce),
                    "parameters": {"type": "object", "properties": {"input": {"type": "string"}}},
                },
            }
            for i in range(rec.tools_count)
        ]

    def response_format(self, row: ApiBody) -> dict | None:
        """The recorded format object, or the API's for the shape's kind (a schema described by
        synthesized text of its length)."""
        rec = self.record
        if self.has_content and rec.content_response_format is not None:
            return load_column(rec, "content_response_format", rec.content_response_format, dict)
        description = ""
        if rec.structured_output == "json_schema" and rec.schema_tokens > 0 and not self.has_content:
            description = self._need_speller().text(rec.schema_tokens, f"{rec.request_id}/schema", self.nonce)
        return row.formats(rec.structured_output, description)


def _check_synthesized_size(record: TraceRecord) -> None:
    """Refuse to synthesize more text than any engine takes: memory grows with every token spelled."""
    sizes = {
        "prompt_tokens": record.prompt_tokens,
        "messages": sum(m.tokens for m in record.messages),
        "tool_definition_tokens": record.tool_definition_tokens,
        "schema_tokens": record.schema_tokens,
    }
    for name, tokens in sizes.items():
        if tokens > MAX_PROMPT_TOKENS:
            raise BadInput(
                f"request {record.request_id}: {name} of {tokens:,} tokens cannot be replayed "
                f"(at most {MAX_PROMPT_TOKENS:,}: no engine takes more, and its body would not fit in memory)"
            )
