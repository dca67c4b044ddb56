"""The sim's HTTP face: OpenAI and Anthropic routes on aiohttp, feeding the engine and the ground-truth log.

Handlers validate at the edge, tokenize in a thread, then park on a future while the
engine (driven by EngineStepper) writes tokens straight to the connection.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import random
import time
import uuid
from collections import Counter, deque
from collections.abc import Sequence as IdSequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import orjson
from aiohttp import web

from llmreplay.engines import SIM_OWNED_BY
from llmreplay.sim import tokenize_api
from llmreplay.sim.apis import SIM_APIS
from llmreplay.sim.config import SimConfig
from llmreplay.sim.engine import Engine, EngineParams, Sequence
from llmreplay.sim.faults import FAULT_HEADER, Fault, draw_fault, immediate_error, parse_fault_header
from llmreplay.sim.ground_truth import REQUEST_COLUMNS, STEP_COLUMNS, ParquetSpool, steps_log_path
from llmreplay.sim.openai_request import CompletionRequest, InvalidRequest
from llmreplay.sim.output_length import REASONING_HEADER, draw_reasoning_tokens, plan_output, reasoning_share
from llmreplay.sim.prometheus import ServerCounters, render_metrics
from llmreplay.sim.prompt_shape import OVERHEAD_TOKEN_ID, PromptShape, prompt_shape
from llmreplay.sim.read_stamps import ARRIVAL_KEY, claim_arrival, drop_body_stamps
from llmreplay.sim.request_id_log import request_id_logger
from llmreplay.sim.response_store import ResponseStore
from llmreplay.sim.sinks import BodySink, StreamSink
from llmreplay.sim.stepper import EngineStepper, StepRecord
from llmreplay.sim.wire import VOCABULARY, tool_argument_fragments, usage
from llmreplay.tokenizers import Tokenizer
from llmreplay.wire.dialects import api_body
from llmreplay.wire.endpoints import REPLAY_PATHS

MAX_BODY_BYTES = 64 * 1024 * 1024
LOG_FLUSH_INTERVAL_S = 0.25  # small conversions: see ground_truth.FLUSH_ROWS
# Measured on the 2-core dev box: tokenizing 512 characters inline costs ~0.1 ms, a thread-pool
# round trip ~0.3 ms; so short prompts are tokenized on the loop, longer ones in the pool.
INLINE_TOKENIZE_MAX_CHARS = 512
_SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}


@dataclass(slots=True)
class ServedRequest:
    """What the ground-truth log learns about one request while it is served (mutable)."""

    request_id: str
    arrival_unix_ns: int
    arrival_mono_ns: int
    endpoint: str
    model: str | None = None
    stream: bool | None = None
    status: int = 0
    outcome: str = "cancelled_by_client"  # until something better is known
    finish_reason: str | None = None
    fault: str | None = None
    prompt_tokens: int | None = None
    seq: Sequence | None = None


def engine_params(config: SimConfig) -> EngineParams:
    return EngineParams(
        max_num_seqs=config.max_num_seqs,
        kv_cache_tokens=config.kv_cache_tokens,
        max_prefill_tokens_per_step=config.max_prefill_tokens_per_step,
        prefill_ns_per_token=config.prefill_ns_per_token,
        decode_base_ns=config.decode_base_ns,
        decode_per_seq_ns=config.decode_per_seq_ns,
        prefix_cache_blocks=config.prefix_cache_blocks,
        block_size=config.block_size,
        spike_rate=config.spike_rate,
        spike_ns=round(config.spike_ms * 1e6),
    )


class SimServer:
    def __init__(self, config: SimConfig, tokenizer: Tokenizer):
        self.config = config
        self._tokenizer = tokenizer
        self.engine = Engine(engine_params(config), random.Random(config.seed))
        self._models = frozenset(config.models)
        self._ids = itertools.count(1)
        self._created_s = int(time.time())
        self._tokenize_pool = ThreadPoolExecutor(2, thread_name_prefix="sim-tokenize")
        self._log_pool = ThreadPoolExecutor(1, thread_name_prefix="sim-log")
        self.request_log = self.step_log = None
        if config.log_path:
            self.request_log = ParquetSpool(config.log_path, REQUEST_COLUMNS, self._log_pool)
            self.step_log = ParquetSpool(steps_log_path(config.log_path), STEP_COLUMNS, self._log_pool)
        self.outcomes: Counter[str] = Counter()
        self.step_lateness_ns: deque[int] = deque(maxlen=4096)
        self._stepper: EngineStepper | None = None
        self._stopping = asyncio.Event()
        self._flusher: asyncio.Task | None = None
        self.responses = ResponseStore(config.response_store_tokens)
        self._word_ids: list[list[int]] | None = None  # each VOCABULARY word's token ids

    def app(self) -> web.Application:
        middlewares = [claim_arrival]
        if self.config.request_id_log:
            middlewares.append(request_id_logger(self.config.request_id_log))
        app = web.Application(client_max_size=MAX_BODY_BYTES, middlewares=middlewares)
        for endpoint in SIM_APIS:  # each answers in its own API's shapes (llmreplay.sim.apis)
            app.router.add_post(REPLAY_PATHS[endpoint], functools.partial(self._exchange, endpoint=endpoint))
        app.router.add_get("/v1/models", self._list_models)
        app.router.add_get("/health", self._health)
        app.router.add_get("/metrics", self._metrics)
        if self.config.serve_tokenize:
            app.router.add_post("/tokenize", self._tokenize)
            app.router.add_post("/detokenize", self._detokenize)
        app.on_startup.append(self._on_startup)
        return app

    async def _on_startup(self, app: web.Application) -> None:
        self._stepper = EngineStepper(self.engine, asyncio.get_running_loop(), self._on_step)
        if self.request_log is not None:
            self._flusher = asyncio.create_task(self._flush_logs_periodically())

    def _on_step(self, step: StepRecord) -> None:
        self.step_lateness_ns.append(step.lateness_ns)
        if self.step_log is not None:
            self.step_log.append(
                (step.start_mono_ns, step.deadline_mono_ns, step.end_mono_ns, step.lateness_ns, step.emit_ns,
                 step.batch_size, step.admitted, step.prefill_tokens, step.spiked)
            )  # fmt: skip

    async def _flush_logs_periodically(self) -> None:
        while True:
            await asyncio.sleep(LOG_FLUSH_INTERVAL_S)
            self.request_log.flush()
            self.step_log.flush()

    def begin_shutdown(self) -> None:
        """Stop every sequence (outcome `shutdown`) and release hanging requests."""
        self._stopping.set()
        self.engine.abort_all("shutdown", time.perf_counter_ns())

    async def close(self) -> None:
        """Publish the logs (after every pending batch) and stop the worker threads."""
        if self._flusher is not None:
            self._flusher.cancel()
        loop = asyncio.get_running_loop()
        for spool in (self.request_log, self.step_log):
            if spool is not None:
                await asyncio.wrap_future(spool.close(), loop=loop)
        self._log_pool.shutdown()
        self._tokenize_pool.shutdown(cancel_futures=True)

    # -- routes ---------------------------------------------------------------------------

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _list_models(self, request: web.Request) -> web.Response:
        data = [
            {"id": name, "object": "model", "created": self._created_s, "owned_by": SIM_OWNED_BY}
            for name in self.config.models
        ]
        return _json({"object": "list", "data": data})

    async def _tokenize(self, request: web.Request) -> web.Response:
        args = (self._tokenizer, await request.read(), self.config.message_overhead_tokens)
        return await self._off_loop(tokenize_api.tokenize, *args)

    async def _detokenize(self, request: web.Request) -> web.Response:
        return await self._off_loop(tokenize_api.detokenize, self._tokenizer, await request.read())

    async def _off_loop(self, function, *args) -> web.Response:
        try:
            answer = await asyncio.get_running_loop().run_in_executor(self._tokenize_pool, function, *args)
        except InvalidRequest as exc:
            return _error_response(exc, self.config.retry_after_s)
        return _json(answer)

    async def _metrics(self, request: web.Request) -> web.Response:
        counters = ServerCounters(self.outcomes, self.step_lateness_ns)
        text = render_metrics(self.engine, self.config.models[0], counters)
        return web.Response(
            body=text.encode(), headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"}
        )

    async def _exchange(self, request: web.Request, endpoint: str) -> web.StreamResponse:
        arrival_mono_ns = request[ARRIVAL_KEY]
        exchange = ServedRequest(
            request.headers.get("X-Request-Id") or f"sim-{next(self._ids)}",
            time.time_ns() - (time.perf_counter_ns() - arrival_mono_ns),
            arrival_mono_ns,
            endpoint,
        )
        try:
            return await self._serve(request, exchange)
        except InvalidRequest as exc:
            exchange.status, exchange.outcome = exc.status, f"error_{exc.status}"
            return _error_response(exc, self.config.retry_after_s, endpoint)
        except ConnectionError:  # the client went away while we wrote to it
            exchange.outcome = "cancelled_by_client"
            raise
        except Exception:  # a bug in the sim: aiohttp answers 500 and logs the traceback
            exchange.status, exchange.outcome = 500, "internal_error"
            raise
        finally:
            self._log(exchange)

    async def _serve(self, request: web.Request, exchange: ServedRequest) -> web.StreamResponse:
        body = await request.read()
        drop_body_stamps(request)
        api = SIM_APIS[exchange.endpoint]
        parsed = api.parse(body)
        model = self._check_model(parsed, exchange)
        rng = random.Random(f"{self.config.seed}/{exchange.request_id}")  # per request: order-independent
        reasoning = 0
        if api.reasons:
            reasoning = draw_reasoning_tokens(self.config, rng, request.headers.get(REASONING_HEADER))
        target_tokens, finish_reason = plan_output(parsed, self.config, rng, reasoning)
        reasoning = reasoning_share(target_tokens, reasoning)
        header = request.headers.get(FAULT_HEADER)
        fault = (
            parse_fault_header(header)
            if header
            else draw_fault(self.config, parsed.stream, target_tokens, rng)
        )
        exchange.fault = fault.label
        immediate = await self._immediate_fault(fault, exchange)
        if immediate is not None:
            return immediate
        if self.engine.num_waiting >= self.config.max_waiting:
            raise InvalidRequest("the sim's waiting queue is full, retry later", 429, "queue_full")
        shape = await self._prompt_shape(parsed, self._history(parsed))
        exchange.prompt_tokens = shape.prompt_tokens
        self._check_fits(shape.prompt_tokens, target_tokens, exchange.endpoint)
        transport = request.transport
        if transport is None or transport.is_closing():
            return web.Response(status=499)  # the client is gone already; logged as cancelled
        encoder = api.encoder(parsed, model, reasoning, uuid.uuid4().hex, self.config.reasoning_field)
        done = asyncio.get_running_loop().create_future()
        stop_after = min(fault.stop_after_tokens, target_tokens - 1)
        response = None
        if parsed.stream:
            response = await self._open_stream(request, encoder)
            exchange.status = 200
            sink = StreamSink(
                transport, encoder, finish_reason, parsed.include_usage, fault.kind, stop_after, done
            )
        else:
            sink = BodySink(transport, fault.kind, stop_after, done)
        seq = Sequence(
            exchange.request_id, shape.prompt_tokens, shape.full_block_hashes, target_tokens,
            exchange.arrival_mono_ns, sink, reasoning_tokens=reasoning,
        )  # fmt: skip
        exchange.seq = seq
        await self._run(seq, fault.first_token_delay_ms, parsed.stream, finish_reason, exchange)
        if parsed.store and exchange.outcome == "ok":  # at once: the client may chain to it right away
            self.responses.put(encoder.response_id, [*shape.conversation_ids, *self._output_ids(parsed, seq)])
        if parsed.stream:
            return await self._end_stream(response, sink, exchange)
        return await self._body_answer(request, encoder, seq, finish_reason, exchange)

    def _check_model(self, parsed: CompletionRequest, exchange: ServedRequest) -> str:
        model = parsed.model or self.config.models[0]  # like vLLM, a missing model means the served one
        exchange.model, exchange.stream = model, parsed.stream
        if model not in self._models:
            raise InvalidRequest(f"The model `{model}` does not exist.", 404, "model_not_found", "model")
        return model

    def _history(self, parsed: CompletionRequest) -> IdSequence[int]:
        """The stored conversation a chained Responses turn continues; 404 when the sim has none."""
        if parsed.previous_response_id is None:
            return ()
        history = self.responses.get(parsed.previous_response_id)
        if history is None:
            raise InvalidRequest(
                f"Previous response with id '{parsed.previous_response_id}' not found.",
                404, "previous_response_not_found", "previous_response_id",
            )  # fmt: skip
        return history

    def _output_ids(self, parsed: CompletionRequest, seq: Sequence) -> list[int]:
        """An answer's token ids as a later turn's history holds them: each output item a message
        (overhead ids, then its text: the reasoning, the answer words or the call's name + arguments)."""
        if self._word_ids is None:
            self._word_ids = self._tokenizer.encode_batch(list(VOCABULARY))
        overhead = [OVERHEAD_TOKEN_ID] * self.config.message_overhead_tokens
        reasoning = min(seq.reasoning_tokens, seq.emitted_tokens)
        answer = seq.emitted_tokens - reasoning
        ids = [*overhead, *self._words(reasoning)] if reasoning else []
        if parsed.tool_name is None:
            return [*ids, *overhead, *self._words(answer)]
        arguments = "".join(tool_argument_fragments(answer))
        return [*ids, *overhead, *self._tokenizer.encode(f"{parsed.tool_name}{arguments}")]

    def _words(self, tokens: int) -> list[int]:
        words = self._word_ids
        return [token for i in range(tokens) for token in words[i % len(words)]]

    async def _prompt_shape(self, parsed: CompletionRequest, history: IdSequence[int]) -> PromptShape:
        args = (self._tokenizer, parsed, self.config.block_size, self.config.message_overhead_tokens, history)
        if sum(map(len, parsed.prompt_texts)) + len(history) <= INLINE_TOKENIZE_MAX_CHARS:
            return prompt_shape(*args)
        return await asyncio.get_running_loop().run_in_executor(self._tokenize_pool, prompt_shape, *args)

    def _check_fits(self, prompt_tokens: int, target_tokens: int, endpoint: str) -> None:
        if prompt_tokens + target_tokens > self.config.kv_cache_tokens:
            raise InvalidRequest(
                f"prompt ({prompt_tokens} tokens) + output ({target_tokens} tokens) exceed the sim's "
                f"KV cache of {self.config.kv_cache_tokens} tokens",
                code="context_length_exceeded",
                param=api_body(endpoint).prompt_field,
            )

    async def _open_stream(self, request: web.Request, encoder) -> web.StreamResponse:
        """Send the SSE headers and the opening event now, so tokens can go straight to the transport."""
        response = web.StreamResponse(headers=_SSE_HEADERS)
        response.enable_chunked_encoding()
        await response.prepare(request)
        await response.write(encoder.opening())  # also flushes the buffered headers
        return response

    async def _run(
        self, seq: Sequence, delay_ms: float, stream: bool, finish_reason: str, exchange: ServedRequest
    ) -> None:
        """Hand the sequence to the engine and wait until it leaves; sets the exchange's outcome
        (and its finish reason when the answer is complete)."""
        if delay_ms:
            asyncio.get_running_loop().call_later(delay_ms / 1e3, self._submit, seq)
        else:
            self._submit(seq)
        try:
            await seq.sink.done
        except asyncio.CancelledError:  # the client hung up (or the sink cut the connection itself)
            self.engine.abort(seq, "cancelled_by_client", time.perf_counter_ns())
            # a stream whose final frame was written before the hang-up is complete (StreamSink)
            complete = stream and seq.sink.final_written
            exchange.outcome = seq.outcome or ("ok" if complete else "cancelled_by_client")
            if exchange.outcome == "ok":
                exchange.finish_reason = finish_reason
            raise
        exchange.outcome = seq.outcome or "ok"
        if exchange.outcome == "ok":
            exchange.finish_reason = finish_reason

    def _submit(self, seq: Sequence) -> None:
        if seq.state == "new":  # not aborted while an injected delay ran
            self.engine.submit(seq)
            self._stepper.kick()

    async def _immediate_fault(self, fault: Fault, exchange: ServedRequest) -> web.StreamResponse | None:
        """Faults answered at once, without the engine; None when the request should run."""
        error = immediate_error(fault)
        if error is not None:
            raise error
        if fault.kind == "invalid":
            exchange.status, exchange.outcome = 200, "invalid"
            return web.Response(
                text="<html><body>simulated non-OpenAI answer</body></html>", content_type="text/html"
            )
        if fault.kind == "hang":
            exchange.outcome = "hang"  # no status: the client must give up (or the sim stops)
            await self._stopping.wait()
            exchange.status = 503
            return _error_response(
                InvalidRequest("the sim is shutting down", 503, "shutdown"), 0, exchange.endpoint
            )
        return None

    async def _end_stream(
        self, response: web.StreamResponse, sink: StreamSink, exchange: ServedRequest
    ) -> web.StreamResponse:
        """End the chunked body. The client may be gone by now although it has every event: the
        sink wrote the final frame (with [DONE]) in the engine's step, and this handler runs one or
        more loop passes later, after the loop may have read the client's close (the openai SDK
        closes at [DONE]). Such a stream is complete, as StreamSink defines it, not cancelled."""
        if exchange.outcome not in ("cut", "cancelled_by_client"):
            try:
                await response.write_eof()
            except ConnectionError:  # aiohttp: "Cannot write to closing transport"
                if not sink.final_written:
                    exchange.outcome = "cancelled_by_client"
        return response

    async def _body_answer(
        self, request: web.Request, encoder, seq: Sequence, finish_reason: str, exchange: ServedRequest
    ) -> web.StreamResponse:
        body = orjson.dumps(
            encoder.body(
                seq.emitted_tokens,
                finish_reason,
                usage(
                    seq.prompt_tokens,
                    seq.emitted_tokens,
                    seq.cached_tokens,
                    min(seq.reasoning_tokens, seq.emitted_tokens),
                ),
            )
        )
        outcome = exchange.outcome
        if outcome in ("ok", "truncated"):
            exchange.status = 200
            # truncated: a clean response whose JSON body stops halfway
            return web.Response(
                body=body if outcome == "ok" else body[: len(body) // 2], content_type="application/json"
            )
        if outcome == "cut":
            response = web.StreamResponse(headers={"Content-Type": "application/json"})
            response.content_length = len(body)
            await response.prepare(request)
            await response.write(body[: len(body) // 2])
            exchange.status = 200
            request.transport.abort()
            return response
        if outcome == "stream_error":
            exchange.status = 200
            error = InvalidRequest("simulated engine error", 500, "simulated_stream_error")
            return _json(_error_body(error, exchange.endpoint))
        if outcome == "shutdown":
            exchange.status = 503
            return _error_response(
                InvalidRequest("the sim is shutting down", 503, "shutdown"), 0, exchange.endpoint
            )
        return web.Response(status=499)  # cancelled: nobody is listening

    def _log(self, exchange: ServedRequest) -> None:
        self.outcomes[exchange.outcome] += 1
        if self.request_log is None:
            return
        seq = exchange.seq
        admitted = first = last = queue = cached = completion = answer = reasoning = None
        if seq is not None:
            cached, completion = seq.cached_tokens, seq.emitted_tokens
            reasoning, answer = min(seq.reasoning_tokens, completion), seq.first_answer_ns or None
            if seq.admitted_ns:
                admitted, queue = seq.admitted_ns, seq.admitted_ns - exchange.arrival_mono_ns
            if seq.first_token_ns:
                first, last = seq.first_token_ns, seq.last_token_ns
        self.request_log.append(
            (exchange.request_id, exchange.arrival_unix_ns, exchange.arrival_mono_ns, admitted, first, last,
             queue, exchange.prompt_tokens, cached, completion, exchange.stream, exchange.status,
             exchange.outcome, exchange.finish_reason, exchange.fault, exchange.model, exchange.endpoint,
             answer, reasoning)
        )  # fmt: skip


def _json(obj: dict, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(obj), status=status, content_type="application/json")


def _error_body(exc: InvalidRequest, endpoint: str) -> dict:
    """The error in the endpoint's API's shape (Anthropic's for /v1/messages)."""
    return SIM_APIS[endpoint].error_body(exc)


def _error_response(
    exc: InvalidRequest, retry_after_s: int, endpoint: str = "chat_completions"
) -> web.Response:
    response = _json(_error_body(exc, endpoint), exc.status)
    if exc.status == 429:
        response.headers["Retry-After"] = str(retry_after_s)
    return response
