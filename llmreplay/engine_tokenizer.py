"""The target engine's own tokenizer and chat template, asked over its HTTP API before the clock.

Each engine's spelling of /tokenize is its row's `tokenize` (llmreplay.engines: vLLM's takes `prompt`
or chat `messages`; llama.cpp's `content`, with `/apply-template`). Loopback or staging only; every call
is bounded by a timeout and failures are BadInput naming the URL.
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

from llmreplay.bounded_read import read_whole
from llmreplay.engines import TOKENIZE_SPELLINGS, TokenizeSpelling
from llmreplay.errors import BadInput
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


def _leading_space(raw: str) -> str:
    return " " + raw[1:] if raw[:1] in _SPACE_MARKS else raw


def _encode_body(spelling: TokenizeSpelling, model: str, text: str, pieces: bool, special: bool = False) -> dict:
    body = {"model": model} if spelling.model_in_body else {}
    return {**body, spelling.text_field: text, spelling.special_field: special, spelling.pieces_field: pieces}


def _ids(answer: dict) -> list[int]:
    return [t["id"] if isinstance(t, dict) else t for t in answer["tokens"]]


def _pieces(spelling: TokenizeSpelling, answer: dict) -> list[tuple[int, str]] | None:
    """[(id, text of the token)] when the answer spells them, else None."""
    tokens = answer["tokens"]
    if spelling.pieces_at is not None:
        texts = answer.get(spelling.pieces_at)
        return None if texts is None else [(i, _leading_space(t)) for i, t in zip(tokens, texts, strict=True)]
    if tokens and isinstance(tokens[0], dict):
        return [(t["id"], t["piece"]) for t in tokens]
    return None


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
        self.base_url, self.model, self.spelling = base_url, model, TOKENIZE_SPELLINGS[dialect]
        self.probe_ids = self.encode(_PROBE)  # also what tells that the spelling is spoken here
        self.id = f"engine:{dialect}:{model}#{self._fingerprint()}"

    # -- the Tokenizer protocol ---------------------------------------------------------------

    def encode(self, text: str) -> list[int]:
        return _ids(self._post("/tokenize", _encode_body(self.spelling, self.model, text, False)))

    def decode(self, ids: list[int]) -> str:
        body = {"model": self.model} if self.spelling.model_in_body else {}
        answer = self._post("/detokenize", {**body, "tokens": list(ids)})
        return answer[self.spelling.detokenized_at]

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
        pieces = _pieces(self.spelling, self._post("/tokenize", _encode_body(self.spelling, self.model, text, True)))
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
        if self.spelling.chat_template == "messages":
            return self._post("/tokenize", body)["count"]
        prompt = self._post("/apply-template", body)["prompt"]
        text = _encode_body(self.spelling, self.model, prompt, False, special=True)
        return len(_ids(self._post("/tokenize", {**text, "parse_special": True})))

    def count_prompt(self, text: str) -> int:
        """The prompt tokens the engine counts for a completions prompt (BOS and the like included)."""
        return len(_ids(self._post("/tokenize", _encode_body(self.spelling, self.model, text, False, special=True))))

    @property
    def spec(self) -> str:
        """The `--tokenizer` spelling of this tokenizer (llmreplay.tokenizers.load_tokenizer reads it)."""
        return f"{SPEC_PREFIX}{self.spelling.spec_name}:{self.model}@{self.base_url}"

    # -- HTTP ----------------------------------------------------------------------------------

    def _fingerprint(self) -> str:
        return hashlib.blake2b(
            json.dumps([self.spelling.spec_name, self.model, self.probe_ids]).encode(), digest_size=6
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
    if dialect not in TOKENIZE_SPELLINGS or not model or not base_url:
        raise BadInput(
            f"--tokenizer {spec}: expected engine:DIALECT:MODEL@URL with DIALECT one of "
            f"{', '.join(TOKENIZE_SPELLINGS)}"
        )
    return dialect, model, base_url


def from_spec(spec: str, api_key: str | None = None) -> EngineTokenizer:
    """`engine:DIALECT:MODEL@BASE_URL` -> the engine's tokenizer (BadInput if it does not answer)."""
    dialect, model, base_url = parse_engine_spec(spec)
    return EngineTokenizer(base_url, model, dialect, api_key)


def detect(base_url: str, model: str, api_key: str | None = None) -> EngineTokenizer | None:
    """The engine's tokenizer in the first spelling whose /tokenize answers, or None (it has none)."""
    for name in TOKENIZE_SPELLINGS:
        try:
            tokenizer = EngineTokenizer(base_url, model, name, api_key, DETECT_TIMEOUT_S)
        except (BadInput, KeyError, TypeError):
            continue
        if tokenizer.probe_ids:
            return tokenizer
    return None
