"""The target engine's own tokenizer and chat template, asked over its HTTP API before the clock.

Two dialects: vLLM/SGLang (`/tokenize` with `prompt` or chat `messages`, `/detokenize`) and
llama.cpp (`/tokenize` with `content`, `/apply-template`, `/detokenize`). Loopback or staging
only; every call is bounded by a timeout and failures are BadInput naming the URL.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import threading
import time
import urllib.parse
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from llmreplay.bounded_read import read_whole
from llmreplay.errors import BadInput
from llmreplay.length_calibration import SYSTEM_ROLES, LengthModel, LengthSample, fit_lengths
from llmreplay.probe_ids import probe_headers
from llmreplay.redaction import scrubbed_excerpt, secret_values

TIMEOUT_S = 30.0  # a whole request and its answer, however slowly the server trickles it
DETECT_TIMEOUT_S = 3.0  # asking whether the target has /tokenize at all
MAX_ANSWER_BYTES = 64 << 20
BATCH_WORKERS = 8
WORDS_PER_CALL = 1500  # words checked in one bulk /tokenize call (a few thousand tokens)
_PROBE = " the quick brown fox jumps over the lazy dog"
_SPACE_MARKS = ("Ġ", "▁")
SPEC_PREFIX = "engine:"  # how byte-level and SentencePiece vocabularies spell a leading space


@dataclass(frozen=True)
class Dialect:
    """How one engine family spells tokenize, detokenize and chat-template calls."""

    name: str
    encode_body: callable  # (model, text, pieces) -> body
    encode_ids: callable  # response -> ids
    encode_pieces: callable  # response -> [(id, text of the token)] or None
    decode_body: callable  # (model, ids) -> body
    decode_text: callable  # response -> text


def _vllm_pieces(answer: dict):
    strs = answer.get("token_strs")
    if strs is None:
        return None
    return [(i, _leading_space(s)) for i, s in zip(answer["tokens"], strs, strict=True)]


def _leading_space(raw: str) -> str:
    return " " + raw[1:] if raw[:1] in _SPACE_MARKS else raw


DIALECTS = {
    "vllm": Dialect(
        "vllm",
        lambda model, text, pieces: {
            "model": model,
            "prompt": text,
            "add_special_tokens": False,
            "return_token_strs": pieces,
        },
        lambda answer: answer["tokens"],
        _vllm_pieces,
        lambda model, ids: {"model": model, "tokens": list(ids)},
        lambda answer: answer["prompt"],
    ),
    "llama.cpp": Dialect(
        "llama.cpp",
        lambda model, text, pieces: {"content": text, "add_special": False, "with_pieces": pieces},
        lambda answer: [t["id"] if isinstance(t, dict) else t for t in answer["tokens"]],
        lambda answer: (
            [(t["id"], t["piece"]) for t in answer["tokens"]]
            if answer["tokens"] and isinstance(answer["tokens"][0], dict)
            else None
        ),
        lambda model, ids: {"tokens": list(ids)},
        lambda answer: answer["content"],
    ),
}


class EngineTokenizer:
    """llmreplay.tokenizers.Tokenizer over a live engine, plus `count_chat` (template included)."""

    def __init__(
        self,
        base_url: str,
        model: str,
        dialect: str,
        api_key: str | None = None,
        timeout_s: float = TIMEOUT_S,
    ):
        self._http = JsonHttp(base_url, api_key, timeout_s)
        self.base_url, self.model, self.dialect = base_url, model, DIALECTS[dialect]
        self.probe_ids = self.encode(_PROBE)  # also what tells that the dialect is spoken here
        self.id = f"engine:{dialect}:{model}#{self._fingerprint()}"

    # -- the Tokenizer protocol ---------------------------------------------------------------

    def encode(self, text: str) -> list[int]:
        return self.dialect.encode_ids(
            self._post("/tokenize", self.dialect.encode_body(self.model, text, False))
        )

    def decode(self, ids: list[int]) -> str:
        return self.dialect.decode_text(self._post("/detokenize", self.dialect.decode_body(self.model, ids)))

    def count(self, text: str) -> int:
        return len(self.encode(text))

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        with ThreadPoolExecutor(BATCH_WORKERS) as pool:
            return list(pool.map(self.encode, texts))

    def vocab_size(self) -> int:
        return 0  # not enumerable over HTTP: llmreplay.exact_text asks `single_token_words` instead

    # -- what only an engine can tell --------------------------------------------------------

    def single_token_words(self, words: Iterable[str]) -> dict[str, int]:
        """ " word" -> id for the words that are one token in running text, from bulk calls."""
        words = list(words)
        chunks = [words[i : i + WORDS_PER_CALL] for i in range(0, len(words), WORDS_PER_CALL)]
        with ThreadPoolExecutor(BATCH_WORKERS) as pool:
            found: dict[str, int] = {}
            for part in pool.map(self._single_in_chunk, chunks):
                found.update(part)
        return found

    def _single_in_chunk(self, words: Sequence[str]) -> dict[str, int]:
        text = "".join(" " + w for w in words)
        pieces = self.dialect.encode_pieces(
            self._post("/tokenize", self.dialect.encode_body(self.model, text, True))
        )
        if pieces is None:
            return {
                " " + w: ids[0]
                for w, ids in zip(words, self.encode_batch([" " + w for w in words]), strict=True)
                if len(ids) == 1
            }
        wanted, found, current = set(words), {}, []
        for token_id, piece in [*pieces, (None, " ")]:  # a word starts at each piece with a space
            if piece.startswith(" ") and current:
                if len(current) == 1 and current[0][1][1:] in wanted:
                    found[current[0][1]] = current[0][0]
                current = []
            current.append((token_id, piece))
        return found

    def count_chat(self, messages: list[dict], tools: list[dict] | None = None) -> int:
        """The prompt tokens the engine counts for this chat request: messages, tools and template."""
        body = {"model": self.model, "messages": messages, "add_generation_prompt": True}
        if tools:
            body["tools"] = tools
        if self.dialect.name == "vllm":
            return self._post("/tokenize", body)["count"]
        prompt = self._post("/apply-template", body)["prompt"]
        answer = self._post("/tokenize", {"content": prompt, "add_special": True, "parse_special": True})
        return len(answer["tokens"])

    def count_prompt(self, text: str) -> int:
        """The prompt tokens the engine counts for a completions prompt (BOS and the like included)."""
        if self.dialect.name == "vllm":
            return self._post("/tokenize", {"model": self.model, "prompt": text, "add_special_tokens": True})[
                "count"
            ]
        return len(self._post("/tokenize", {"content": text, "add_special": True})["tokens"])

    @property
    def spec(self) -> str:
        """The `--tokenizer` spelling of this tokenizer (llmreplay.tokenizers.load_tokenizer reads it)."""
        return f"{SPEC_PREFIX}{self.dialect.name}:{self.model}@{self.base_url}"

    # -- HTTP ----------------------------------------------------------------------------------

    def _fingerprint(self) -> str:
        return hashlib.blake2b(
            json.dumps([self.dialect.name, self.model, self.probe_ids]).encode(), digest_size=6
        ).hexdigest()

    def _post(self, path: str, body: dict) -> dict:
        return self._http.post(path, body)


class JsonHttp:
    """POST JSON, read JSON: one kept-alive connection per thread; each answer whole within `timeout_s`."""

    def __init__(self, base_url: str, api_key: str | None = None, timeout_s: float = TIMEOUT_S):
        self.timeout_s = timeout_s
        parts = urllib.parse.urlsplit(base_url)
        if parts.username or parts.password:
            raise BadInput(
                f"{parts.hostname}: credentials in the target URL are not supported; use --api-key"
            )
        self._host, self._port = parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)
        self._https = parts.scheme == "https"
        self._root = parts.path.rstrip("/").removesuffix("/v1")
        self.base_url = base_url
        self._headers = {"Content-Type": "application/json"}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._secrets = secret_values((), api_key)
        self._local = threading.local()

    def _connection(self) -> http.client.HTTPConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            cls = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
            conn = self._local.conn = cls(self._host, self._port, timeout=self.timeout_s)
        return conn

    def post(self, path: str, body: dict, purpose: str | None = None) -> dict:
        """`purpose` names the request in its X-Request-ID (llmreplay.probe_ids); default: the path's."""
        url = f"{self.base_url.rstrip('/')}{path}"
        data = json.dumps(body).encode()
        headers = {**self._headers, **probe_headers(purpose or path.strip("/").replace("/", "-"))}
        for attempt in (1, 2):  # a kept-alive connection the server closed is retried once
            conn = self._connection()
            deadline = time.monotonic() + self.timeout_s
            try:
                conn.request("POST", self._root + path, data, headers)
                answer = conn.getresponse()
                payload = read_whole(answer, deadline, conn.sock, MAX_ANSWER_BYTES)
            except ValueError as exc:
                raise BadInput(f"{url}: {exc}") from None
            except (OSError, http.client.HTTPException) as exc:
                conn.close()
                self._local.conn = None
                if attempt == 2 or isinstance(exc, TimeoutError):  # only a dropped keep-alive is retried
                    raise BadInput(f"{url}: the engine did not answer ({exc})") from None
                continue
            if answer.status != 200:
                said = self._said(payload)[:200]
                raise BadInput(f"{url}: HTTP {answer.status} {said!r}")
            try:
                return json.loads(payload)
            except ValueError:
                raise BadInput(f"{url}: the answer is not JSON ({self._said(payload)[:80]!r})") from None
        raise AssertionError("unreachable")

    def _said(self, raw: bytes) -> str:
        """What the server answered, with the key and anything credential-like blanked (it may echo them)."""
        return scrubbed_excerpt(raw[:65536].decode("utf-8", "replace"), self._secrets)


def parse_engine_spec(spec: str) -> tuple[str, str, str]:
    """`engine:DIALECT:MODEL@BASE_URL` -> (dialect, model, base_url); BadInput when malformed."""
    dialect, _, rest = spec.removeprefix(SPEC_PREFIX).partition(":")
    model, _, base_url = rest.rpartition("@")
    if dialect not in DIALECTS or not model or not base_url:
        raise BadInput(
            f"--tokenizer {spec}: expected engine:DIALECT:MODEL@URL with DIALECT one of {', '.join(DIALECTS)}"
        )
    return dialect, model, base_url


def from_spec(spec: str, api_key: str | None = None) -> EngineTokenizer:
    """`engine:DIALECT:MODEL@BASE_URL` -> the engine's tokenizer (BadInput if it does not answer)."""
    dialect, model, base_url = parse_engine_spec(spec)
    return EngineTokenizer(base_url, model, dialect, api_key)


def detect(base_url: str, model: str, api_key: str | None = None) -> EngineTokenizer | None:
    """The engine's tokenizer in the first dialect whose /tokenize answers, or None (it has none)."""
    for name in DIALECTS:
        try:
            tokenizer = EngineTokenizer(base_url, model, name, api_key, DETECT_TIMEOUT_S)
        except (BadInput, KeyError, TypeError):
            continue
        if tokenizer.probe_ids:
            return tokenizer
    return None


CALIBRATED_PREFIX = "calibrated:"
Calibration = LengthModel  # the target's count as a function of a local tokenizer's view
# The probe set: every layout at every length (local tokens of all texts), plus tools on a few; each
# probe asks for one output token. Bounded by PROBE_BUDGET_S in all; MIN_PROBES answers are needed.
PROBE_LAYOUTS = (
    ("user",),
    ("system", "user"),
    ("user", "assistant", "user"),
    ("system", "user", "assistant", "user", "assistant", "user"),
)
PROBE_LENGTHS = (16, 48, 160, 512, 1536)
PROBE_TOOL_CASES = ((("user",), 48), (("user",), 512), (("system", "user"), 160), (("system", "user"), 1536))
PROBE_WORKERS = 4
PROBE_BUDGET_S = 60.0
MIN_PROBES = 8


@dataclass(frozen=True)
class Probe:
    roles: tuple[str, ...]
    tokens: int  # local tokens of all its texts together
    tools: bool


def probe_plan() -> list[Probe]:
    plan = [Probe(roles, n, False) for n in PROBE_LENGTHS for roles in PROBE_LAYOUTS]
    return plan + [Probe(roles, n, True) for roles, n in PROBE_TOOL_CASES]


def probe_body(probe: Probe, index: int, text) -> tuple[list[dict], list[dict] | None]:
    """(messages, tools) of a probe: its tokens split unevenly over the messages (and a tool's
    description), each text its own (no prefix shared with another probe)."""
    parts = len(probe.roles) + probe.tools
    weights = [1 + (index + i) % 3 for i in range(parts)]
    sizes = [max(1, probe.tokens * w // sum(weights)) for w in weights]
    messages = [
        {"role": role, "content": text(n, f"probe{index}/{i}".encode())}
        for i, (role, n) in enumerate(zip(probe.roles, sizes, strict=False))
    ]
    tools = None
    if probe.tools:
        tools = [
            {
                "type": "function",
                "function": {
                    "name": "tool_0",
                    "description": text(sizes[-1], f"probe{index}/tool".encode()),
                    "parameters": {"type": "object", "properties": {"input": {"type": "string"}}},
                },
            }
        ]
    return messages, tools


def calibrate(base_url: str, model: str, local, api_key: str | None = None) -> Calibration:
    """The probe set (max_tokens 1) against a target without /tokenize, its count fitted on the local
    view (llmreplay.length_calibration). BadInput when fewer than MIN_PROBES probes were answered."""
    from llmreplay.exact_text import ExactText

    http_ = JsonHttp(base_url, api_key)
    text = ExactText(local).text
    deadline = time.monotonic() + PROBE_BUDGET_S
    failures: list[str] = []

    def measure(item: tuple[int, Probe]) -> LengthSample | None:
        index, probe = item
        if time.monotonic() > deadline:
            return None
        messages, tools = probe_body(probe, index, text)
        body = {"model": model, "messages": messages, "max_tokens": 1}
        if tools:
            body["tools"] = tools
        try:
            answer = http_.post("/v1/chat/completions", body, purpose="calibrate")
        except BadInput as exc:  # one probe too long for the target, say: the others still count
            failures.append(str(exc))
            return None
        try:
            counted = int(answer["usage"]["prompt_tokens"])
        except (KeyError, TypeError, ValueError):
            failures.append(f"{base_url}: a probe's answer has no usage.prompt_tokens")
            return None
        return LengthSample(*_local_view(local, messages, tools), counted)

    with ThreadPoolExecutor(PROBE_WORKERS) as pool:
        samples = [s for s in pool.map(measure, enumerate(probe_plan())) if s is not None]
    if len(samples) < MIN_PROBES:
        why = failures[0] if failures else f"only {len(samples)} answered within {PROBE_BUDGET_S:g} s"
        raise BadInput(why if why.endswith("usage.prompt_tokens") else f"length calibration: {why}")
    return fit_lengths(samples)


def _local_view(local, messages, tools):
    texts = [str(m.get("content") or "") for m in messages]
    if tools:
        texts.append(json.dumps(tools))
    system = any(m.get("role") in SYSTEM_ROLES for m in messages)
    return len(messages), system, bool(tools), sum(local.count(t) for t in texts), sum(map(len, texts))


class CalibratedTokenizer:
    """A local tokenizer whose request counts are the target's as fitted (approximate, never exact)."""

    def __init__(self, local, calibration: Calibration, local_spec: str | None):
        self.local, self.calibration, self._local_spec = local, calibration, local_spec
        self.id = f"{CALIBRATED_PREFIX}{local.id}"
        self.encode, self.decode, self.count = local.encode, local.decode, local.count
        self.encode_batch, self.vocab_size = local.encode_batch, local.vocab_size

    def count_chat(self, messages: list[dict], tools: list[dict] | None = None) -> int:
        return round(self.calibration.predict(*_local_view(self.local, messages, tools)))

    def count_prompt(self, text: str) -> int:
        return round(self.calibration.predict(1, False, False, self.local.count(text), len(text)))

    @property
    def step_rate(self) -> float:
        """Target tokens per local token added to synthesized text (the prompt fitter's step size)."""
        return self.calibration.step_rate

    @property
    def spec(self) -> str:
        cal = self.calibration
        numbers = ",".join(repr(float(getattr(cal, t))) for t in SPEC_TERMS)
        return f"{CALIBRATED_PREFIX}{numbers}:{self._local_spec or ''}"


SPEC_TERMS = (
    "per_token",
    "per_request",
    "per_message",
    "per_system",
    "per_tools",
    "per_char",
    "chars_per_token",
)


def parse_calibrated_spec(spec: str) -> tuple[Calibration, str | None]:
    """`calibrated:A,B,C,D,E,F:LOCAL` (SPEC_TERMS in order) or the older `calibrated:A:B:C:LOCAL`
    (per token, per request, per message) -> (its calibration, the local spec or None)."""
    from llmreplay.tokenizers import parse_tokenizer_spec

    rest = spec.removeprefix(CALIBRATED_PREFIX)
    try:
        head, _, tail = rest.partition(":")
        if "," in head:
            values = [float(v) for v in head.split(",")]
            if len(values) != len(SPEC_TERMS):
                raise ValueError
            calibration, local_spec = Calibration(**dict(zip(SPEC_TERMS, values, strict=True))), tail
        else:
            a, b, c, local_spec = rest.split(":", 3)
            calibration = Calibration(per_token=float(a), per_request=float(b), per_message=float(c))
    except ValueError:
        raise BadInput(
            f"--tokenizer {spec}: expected calibrated:{','.join(t.upper() for t in SPEC_TERMS)}:LOCAL"
        ) from None
    parse_tokenizer_spec(local_spec or None)
    return calibration, local_spec or None


def calibrated_from_spec(spec: str) -> CalibratedTokenizer:
    from llmreplay.tokenizers import load_tokenizer

    calibration, local_spec = parse_calibrated_spec(spec)
    return CalibratedTokenizer(load_tokenizer(local_spec), calibration, local_spec)
