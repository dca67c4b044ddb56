"""The target's tokenizer over HTTP: the sim's /tokenize (vLLM's dialect) counts as its usage does,
the calibration from usage finds the sim's 1:1 count, and a trickling server cannot hold a replay."""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.request

import pytest

from llmreplay.calibrated_tokenizer import calibrate
from llmreplay.engine_tokenizer import EngineTokenizer, JsonHttp, detect, from_spec
from llmreplay.errors import BadInput
from llmreplay.exact_text import ExactText
from llmreplay.tokenizers import load_tokenizer


@pytest.fixture(scope="module")
def sim_url():
    from in_process_sim import InProcessSim

    sim = InProcessSim()
    url = sim.start()
    yield url
    sim.stop()


def _usage(url: str, messages: list[dict]) -> int:
    body = json.dumps({"model": "sim-model", "messages": messages, "max_tokens": 1}).encode()
    request = urllib.request.Request(f"{url}/v1/chat/completions", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.loads(answer.read())["usage"]["prompt_tokens"]


def test_the_sims_tokenize_counts_as_its_usage(sim_url):
    engine = detect(sim_url, "sim-model")
    assert engine.spelling.spec_name == "vllm"
    assert from_spec(engine.spec).id == engine.id
    text = ExactText(engine).text
    for n in (1, 40, 700):
        messages = [{"role": "system", "content": text(5, b"s")}, {"role": "user", "content": text(n, b"u")}]
        assert engine.count_chat(messages) == _usage(sim_url, messages) == n + 5
    assert engine.decode(engine.encode(" lorem ipsum dolor")) == " lorem ipsum dolor"


def test_bulk_single_token_words_agree_with_the_local_tokenizer(sim_url):
    engine = EngineTokenizer(sim_url, "sim-model", "vllm")
    local = load_tokenizer()
    words = ["dolor", "amet", "zzqxjv", "the", "consectetur"]
    found = engine.single_token_words(words)
    assert found == {" " + w: local.encode(" " + w)[0] for w in words if len(local.encode(" " + w)) == 1}
    assert ExactText(engine).vocabulary == ExactText(local).vocabulary


def test_calibration_from_usage_finds_the_sims_count(sim_url):
    local = load_tokenizer()
    calibration = calibrate(sim_url, "sim-model", local, ExactText(local).text)
    assert calibration.per_token == pytest.approx(1.0)
    assert calibration.per_request == pytest.approx(0.0, abs=1e-9)
    tokenizer = load_tokenizer(f"calibrated:{calibration.per_token!r}:0.0:0.0:")
    text = ExactText(local).text(321, b"x")
    assert tokenizer.count_chat([{"role": "user", "content": text}]) == 321


@pytest.fixture
def trickling_url():
    """A server that answers 200 and then one byte every 200 ms, for ever."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve():
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            threading.Thread(target=trickle, args=(conn,), daemon=True).start()

    def trickle(conn):
        with conn:
            try:
                conn.recv(65536)
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n")
                while not stop.is_set():
                    conn.sendall(b"{")
                    time.sleep(0.2)
            except OSError:
                pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    stop.set()
    thread.join(5)
    listener.close()


def test_a_trickling_answer_is_cut_at_the_deadline(trickling_url):
    started = time.monotonic()
    with pytest.raises(BadInput, match="did not answer"):
        JsonHttp(trickling_url, None, timeout_s=0.8).post("/tokenize", {"prompt": "x"})
    assert time.monotonic() - started < 2.0


def test_credentials_in_the_url_are_refused():
    with pytest.raises(BadInput, match="credentials"):
        JsonHttp("http://user:secret@127.0.0.1:9/")


@pytest.fixture
def answering():
    """answering(status, make_body) -> the URL of a server answering every POST so (body from the headers)."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    servers = []

    def start(status: int, make_body) -> str:
        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                body = json.dumps(make_body(self.headers)).encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def test_an_answer_echoing_the_api_key_never_shows_it(answering):
    """A 401 that repeats the Authorization header: the one-line error names the status, not the key."""
    url = answering(401, lambda headers: {"error": f"bad credentials: {headers.get('Authorization')}"})
    key = "sk-live-0123456789abcdefXYZ"
    with pytest.raises(BadInput) as caught:
        JsonHttp(url, key).post("/tokenize", {"prompt": "x"})
    message = str(caught.value)
    assert "HTTP 401" in message and key not in message and "\n" not in message


def test_a_calibration_probe_without_usage_is_one_line(answering):
    url = answering(200, lambda headers: {"choices": []})
    with pytest.raises(BadInput, match=r"a probe's answer has no usage.prompt_tokens$"):
        calibrate(url, "m", load_tokenizer(), ExactText(load_tokenizer()).text)


def test_an_engine_with_its_own_tokenize_spelling_is_one_row(monkeypatch):
    """A toy engine spelling /tokenize its own way (`text`, `special`, pieces as {id, piece}, a rendered
    template): its row's TokenizeSpelling is all EngineTokenizer needs, with no branch on its name."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    import llmreplay.engine_tokenizer as engine_tokenizer
    from llmreplay.engines import TokenizeSpelling

    local = load_tokenizer()
    seen = []

    class Toy(BaseHTTPRequestHandler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            seen.append((self.path, sorted(body)))
            if self.path == "/tokenize":
                ids = ([1] if body["special"] else []) + local.encode(body["text"])
                tokens = [{"id": i, "piece": local.decode([i])} for i in ids] if body["pieces"] else ids
                answer = {"tokens": tokens}
            elif self.path == "/detokenize":
                answer = {"text": local.decode(body["tokens"])}
            else:  # /apply-template
                answer = {"prompt": "".join(f"<{m['role']}>{m['content']}" for m in body["messages"])}
            data = json.dumps(answer).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Toy)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    toy = TokenizeSpelling("toy", "text", "special", "pieces", False, None, "text", "apply-template")
    monkeypatch.setitem(engine_tokenizer.TOKENIZE_SPELLINGS, "toy", toy)
    try:
        engine = from_spec(f"engine:toy:m@{url}")
        text = " the quick brown fox"
        assert engine.encode(text) == local.encode(text) and engine.decode(local.encode(text)) == text
        assert engine.count_prompt(text) == local.count(text) + 1  # its BOS
        messages = [{"role": "user", "content": "hello there"}]
        assert engine.count_chat(messages) == 1 + local.count("<user>hello there")
        assert engine.single_token_words(["quick", "brown"]) == {
            " " + w: local.encode(" " + w)[0] for w in ("quick", "brown")
        }
        assert engine.spec == f"engine:toy:m@{url}"
        assert ("/apply-template", ["add_generation_prompt", "messages", "model"]) in seen
    finally:
        server.shutdown()
        server.server_close()
