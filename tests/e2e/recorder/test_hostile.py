"""Hostile traffic through a real `llmreplay record` in front of a real `llmreplay sim`: the recorder fails open.

Poison values (the issue's regression) and property-based junk requests must never stop the proxy
forwarding; every request becomes a row (values no column can hold are nulled and named in
`invalid_fields`) or a dead letter in `.spool/rejected/`, and whatever the recorder writes stays
readable by `llmreplay inspect`, `replay` and `anonymize`. The last tests reproduce, in process,
conversion bugs found this way (each was a dead letter or a dropped capture before its fix).
"""

from __future__ import annotations

import http.client
import json
import math
import os
import re
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import orjson
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from live_processes import llmreplay_cmd

from llmreplay.trace_io import read_trace
from llmreplay.trace_values import FLOAT32_MAX
from recorder.keys import keyed_hash, load_or_create_key
from tests.e2e.recorder.test_recorder import TOKENIZER, chat, client, raw_post, start_recorder, stop

CHAT = "/v1/chat/completions"
# a quick sim: short answers, cheap steps, the recorder's fast tokenizer (the default loads in 2.3 s)
FAST_SIM = ("--tokenizer", TOKENIZER, "--output-len-median-tokens", "4", "--output-len-max-tokens", "8",
            "--decode-base-ms", "0.5", "--prefill-ns-per-token", "0")  # fmt: skip
ABSURD_RETRY_AFTER = "99999999999999999999"  # seconds: 1e23 ms, beyond int64
DONE_LINE = "Every journaled request is filed in Parquet."


# -- shared helpers ------------------------------------------------------------------------
def run_cli(*args: str, timeout_s: float = 60) -> str:
    """An `llmreplay` subcommand; asserts exit 0 and no traceback, returns stdout + stderr."""
    done = subprocess.run(llmreplay_cmd(*args), capture_output=True, text=True, timeout=timeout_s)
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"llmreplay {args[0]} exited {done.returncode}:\n{output[-3000:]}"
    assert "Traceback" not in output, output[-3000:]
    return output


def recorder_log(tmp_path: Path, name: str = "recorder") -> str:
    return "".join(p.read_text(errors="replace") for p in sorted(tmp_path.glob(f"{name}-*.log")))


def dead_letters(out: Path) -> list[dict]:
    path = out / ".spool" / "rejected" / "reasons.jsonl"
    return [orjson.loads(line) for line in path.read_bytes().splitlines()] if path.exists() else []


def trace_files(out: Path) -> list[Path]:
    return sorted(out.glob("*.parquet"))


def user_body(user: str, fields: bytes = b"", content: str = "hi") -> bytes:
    """A chat body as curl would send it: raw bytes, so numbers reach the proxy exactly as written."""
    extra = b", " + fields if fields else b""
    return b'{"model": "sim-model", "user": "%s", "messages": [{"role": "user", "content": "%s"}]%s}' % (
        user.encode(),
        content.encode(),
        extra,
    )


def rows_by_user(table, key: bytes, names) -> dict[str, dict]:
    hashes = {keyed_hash(key, name, "u"): name for name in names}
    return {hashes[r["user_id"]]: r for r in table.to_pylist() if r["user_id"] in hashes}


# -- 1. the poison values ----------------------------------------------------------
# (user, raw JSON fields, the column nulled and named in invalid_fields)
POISON = [
    ("p-max-tokens-2^31", b'"max_tokens": 2147483648', "max_tokens"),
    ("p-max-completion-2^40", b'"max_completion_tokens": 1099511627776', "max_tokens"),
    ("p-n-40000", b'"n": 40000', "n"),
    ("p-max-tokens-negative", b'"max_tokens": -5', "max_tokens"),
    ("p-temperature-1e300", b'"temperature": 1e300', "temperature"),
    ("p-top-p-3.5e38", b'"top_p": 3.5e38', "top_p"),
    ("p-seed-2^64-1", b'"seed": 18446744073709551615', "seed"),  # orjson: an int, beyond int64
    ("p-n-duplicate-key", b'"n": 1, "n": 40000', "n"),  # the last duplicate wins, as in orjson
    ("p-stream-max-tokens-2^31", b'"stream": true, "max_tokens": 2147483648', "max_tokens"),
]
# orjson parses an integer beyond 64 bits as a float: the request parser drops it (seed is null),
# but it is not named in invalid_fields (see test_seed_beyond_64_bits_is_named below)
SEED_2_70 = ("p-seed-2^70", b'"seed": 1180591620717411303424')
RETRY = ("p-retry-after", b'"max_tokens": 4')  # with X-Sim-Fault: 429 -> Retry-After: 99999999999999999999


def send_poison(base: str, auth: dict) -> dict[str, int]:
    statuses = {}
    for user, fields, _ in POISON:
        statuses[user] = raw_post(base, CHAT, user_body(user, fields), auth)[0]
    statuses[SEED_2_70[0]] = raw_post(base, CHAT, user_body(SEED_2_70[0], SEED_2_70[1]), auth)[0]
    status, _ = raw_post(base, CHAT, user_body(RETRY[0], RETRY[1]), {**auth, "X-Sim-Fault": "429"})
    assert status == 429
    statuses[RETRY[0]] = status
    return statuses


def check_poison_rows(rows: dict[str, dict]) -> None:
    for user, _, column in POISON:
        row = rows[user]
        assert row[column] is None and column in (row["invalid_fields"] or ()), (user, row["invalid_fields"])
    assert rows[SEED_2_70[0]]["seed"] is None
    retry = rows[RETRY[0]]
    assert retry["http_status"] == 429 and retry["error_kind"] == "rate_limited_429"
    assert retry["retry_after_ms"] is None and retry["invalid_fields"] == ["retry_after_ms"]
    assert retry["max_tokens"] == 4


@pytest.mark.e2e
def test_poison_values_are_nulled_named_and_forwarding_goes_on(processes, start_sim, tmp_path):
    sim = start_sim("--retry-after-s", ABSURD_RETRY_AFTER, *FAST_SIM)
    target = start_sim(*FAST_SIM, name="target")  # the replay's engine
    out = tmp_path / "trace"
    base, proc = start_recorder(processes, tmp_path, sim, out, "--rotate", "5s")
    started = time.monotonic()
    auth = {"Authorization": "Bearer sk-poison"}
    statuses = send_poison(base, auth)
    assert set(statuses.values()) <= {200, 400, 429}, statuses

    # normal traffic (the openai SDK) across at least one rotation: every request is answered
    cli = client(base)
    normal: list[str] = []
    while time.monotonic() - started < 7.0 and len(normal) < 1500:
        name = f"normal-{len(normal)}"
        answer = chat(cli, name, [{"role": "user", "content": f"question {len(normal)}"}], max_tokens=2)
        assert answer.choices[0].finish_reason == "length"
        normal.append(name)
        time.sleep(0.02)  # a steady few hundred requests, not a flood: the count bound stays far away
        if (
            len(normal) % 25 == 0
        ):  # the poison again between normal requests: answered, and forwarding goes on
            assert raw_post(base, CHAT, user_body("p-again", b'"n": 40000'), auth)[0] == 400
            normal.append("p-again")
    stop(proc)
    assert proc.returncode == 0
    log_text = recorder_log(tmp_path)
    assert DONE_LINE in log_text and "not journaled" not in log_text
    assert not dead_letters(out)

    files = trace_files(out)
    assert len(files) >= 2, files  # --rotate 5s over 7 s of traffic
    table = read_trace(out).table  # validates each file, refuses duplicate request ids
    key = load_or_create_key(tmp_path / "recorder.key")
    assert table.num_rows == len(statuses) + len(normal)
    rows = rows_by_user(table, key, [*statuses, *normal])
    check_poison_rows(rows)
    again = [r for r in table.to_pylist() if r["user_id"] == keyed_hash(key, "p-again", "u")]
    assert len(again) == normal.count("p-again") and all(r["invalid_fields"] == ["n"] for r in again)
    normal_rows = [rows[n] for n in normal if n != "p-again"]
    assert all(r["http_status"] == 200 and r["error_kind"] is None for r in normal_rows)
    assert all(r["invalid_fields"] is None for r in normal_rows)
    print(f"\npoison: {len(statuses)} poison + {len(normal)} later requests, {len(files)} files")

    # the trace is readable by the other stages
    for path in (out, *files):
        assert "recorder" in run_cli("inspect", str(path))
    run_cli("inspect", "--json", str(out))
    run_cli("replay", str(out), "--target", target, "-o", str(tmp_path / "run"), "--limit", "25",
            "--duration", "5", "--grace", "5", "--tokenizer", TOKENIZER, "--max-dispatch-lag", "100s", "--max-error-rate", "100%",
            "--quiet")  # fmt: skip
    assert (tmp_path / "run" / "results.parquet").exists()


@pytest.mark.e2e
def test_a_poisoned_content_trace_anonymizes(processes, start_sim, tmp_path):
    sim = start_sim("--retry-after-s", ABSURD_RETRY_AFTER, *FAST_SIM)
    out = tmp_path / "trace"
    base, proc = start_recorder(processes, tmp_path, sim, out, "--content")
    statuses = send_poison(base, {})
    cli = client(base)
    normal = [f"normal-{i}" for i in range(5)]
    for name in normal:
        chat(cli, name, [{"role": "user", "content": f"Tell me about {name}."}], max_tokens=3)
    stop(proc)
    assert proc.returncode == 0 and DONE_LINE in recorder_log(tmp_path)

    table = read_trace(out).table
    assert table.num_rows == len(statuses) + len(normal)
    check_poison_rows(rows_by_user(table, load_or_create_key(tmp_path / "recorder.key"), statuses))
    anonymized = tmp_path / "anonymized.parquet"
    report = run_cli("anonymize", str(out), "-o", str(anonymized), "--key-file", str(tmp_path / "anon.key"),
                     "--tokenizer", TOKENIZER, "--verify")  # fmt: skip
    assert "verification PASSED" in report
    run_cli("inspect", str(anonymized))
    kept = pq.read_table(anonymized, columns=["invalid_fields"]).column("invalid_fields").to_pylist()
    assert sorted(map(tuple, filter(None, kept))) == sorted(
        tuple(r["invalid_fields"]) for r in table.to_pylist() if r["invalid_fields"]
    )


# -- 2. property-based hostile requests through one proxy ---------------------------------
SESSION_HEADER = "X-Session-Id"
PATHS = (CHAT, CHAT, "/v1/completions", "/v1/embeddings", "/v1/responses", "/v1/messages", CHAT + "?v=x")
SAMPLING = ("max_tokens", "max_completion_tokens", "max_output_tokens", "n", "seed", "top_p", "temperature")
EDGE_INTS = (0, 1, -1, 2**15 - 1, 2**15, -(2**15) - 1, 2**31 - 1, 2**31, -(2**31) - 1, 2**32, 2**63 - 1,
             2**63, -(2**63), -(2**63) - 1, 2**64 - 1, 2**64, 2**70, -(2**70), 10**30)  # fmt: skip
EDGE_FLOATS = (1e300, -1e300, 3.5e38, -3.5e38, FLOAT32_MAX, 5e-324, 1e-45, 2.0, 0.5, -0.0, 1e19)

ints = st.one_of(st.sampled_from(EDGE_INTS), st.integers(-(2**80), 2**80))
floats = st.one_of(st.sampled_from(EDGE_FLOATS), st.floats(allow_nan=False, allow_infinity=False))
leaf = st.one_of(st.none(), st.booleans(), ints, floats, st.text(max_size=12))
junk = st.recursive(
    leaf, lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)),
    max_leaves=8,
)  # fmt: skip
text_part = st.fixed_dictionaries({"type": st.just("text"), "text": st.one_of(st.text(max_size=20), junk)})
content = st.one_of(st.text(max_size=40), junk, st.lists(st.one_of(text_part, junk), max_size=3))
role = st.one_of(st.sampled_from(("user", "system", "assistant", "tool", "developer", "")), junk)
message = st.one_of(
    st.fixed_dictionaries(
        {"role": role, "content": content},
        optional={
            "tool_calls": st.one_of(junk, st.lists(st.fixed_dictionaries({"function": junk}), max_size=2)),
            "type": st.sampled_from(("message", "function_call", "function_call_output")),
            "name": junk,
            "output": junk,
        },
    ),
    junk,
)
prompt = st.one_of(
    st.text(max_size=40), st.lists(ints, max_size=5), st.lists(st.lists(ints, max_size=3), max_size=2), junk
)
# no "deflate": the sim (aiohttp) never answers a non-deflate body sent as deflate when the body arrives
# in a TCP write of its own, as it does through mitmproxy (a sim bug, not the recorder's)
ENCODINGS = (b"gzip", b"br", b"zstd", b"identity", b"x-bogus", b"gzip, gzip")
header_bytes = st.binary(max_size=40).map(lambda b: b.replace(b"\r", b"").replace(b"\n", b""))
giant = st.sampled_from((9_000, 100_000, 1_000_000)).map(lambda n: b"Bearer " + b"A" * n)
headers = st.lists(
    st.one_of(
        st.tuples(st.just(SESSION_HEADER), header_bytes),
        st.tuples(st.sampled_from(("Authorization", "api-key", "x-api-key")), st.one_of(header_bytes, giant)),
        st.tuples(st.just("Content-Encoding"), st.sampled_from(ENCODINGS)),
        st.tuples(st.just("X-Request-Id"), header_bytes),  # the sim's, not the recorder's: it mints its own
    ),
    max_size=3,
)


@dataclass
class Hostile:
    kind: str
    path: str
    body: bytes
    headers: list[tuple[str, bytes]] = field(default_factory=list)
    chunked: bool = False


@st.composite
def json_requests(draw) -> Hostile:
    path = draw(st.sampled_from(PATHS))
    obj: dict = {"model": draw(st.one_of(st.just("sim-model"), junk))}
    if path.startswith(CHAT):
        obj["messages"] = draw(st.one_of(st.lists(message, max_size=4), junk))
    elif path == "/v1/responses":
        obj["input"] = draw(st.one_of(st.text(max_size=40), st.lists(message, max_size=3), junk))
        obj.update(draw(st.dictionaries(st.just("instructions"), st.one_of(st.text(max_size=20), junk))))
    elif path == "/v1/messages":  # Anthropic: content blocks under messages, a system string or blocks
        obj["messages"] = draw(st.one_of(st.lists(message, max_size=3), junk))
        obj.update(draw(st.dictionaries(st.just("system"), st.one_of(content, junk))))
    else:
        obj["prompt" if path == "/v1/completions" else "input"] = draw(prompt)
    obj.update(draw(st.dictionaries(st.sampled_from(SAMPLING), st.one_of(ints, floats, junk), max_size=5)))
    optional = st.sampled_from(
        ("stream", "user", "tools", "response_format", "stop", "tool_choice", "stream_options")
    )
    obj.update(draw(st.dictionaries(optional, junk, max_size=3)))
    text = json.dumps(obj, ensure_ascii=draw(st.booleans()))  # big ints exactly as written, like curl
    return Hostile("json", path, text.encode("utf-8", "surrogatepass"))  # lone surrogates: invalid UTF-8


def deep_body(depth: int, where: str, brackets: str) -> bytes:
    opening, closing = (b"[" * depth, b"]" * depth) if brackets == "[]" else (b'{"a":' * depth, b"}" * depth)
    nested = opening + b"1" + closing
    wrap = {
        "top": b"%s",
        "content": b'{"model":"sim-model","messages":[{"role":"user","content":%s}]}',
        "tools": b'{"model":"sim-model","messages":[{"role":"user","content":"t"}],"tools":[%s]}',
        "schema": b'{"model":"sim-model","messages":[],"response_format":{"type":"json_schema","json_schema":%s}}',
        "extra": b'{"model":"sim-model","messages":[{"role":"user","content":"e"}],"metadata":%s}',
    }[where]
    return wrap % nested


def huge_body(megabytes: int, where: str) -> bytes:
    big = b"lorem ipsum dolor sit amet " * (megabytes * 37_000)  # ~1 MB a unit
    if where == "content":
        return b'{"model":"sim-model","max_tokens":1,"messages":[{"role":"user","content":"%s"}]}' % big
    return b'{"model":"sim-model","max_tokens":1,"%s":"%s","messages":[]}' % (where.encode(), big)


def bad_utf8_body(junk_bytes: bytes) -> bytes:
    return b'{"model":"sim-model","messages":[{"role":"user","content":"%s\xff"}]}' % junk_bytes


def duplicate_body(name: str, first: int, second: int) -> bytes:
    return b'{"model":"sim-model","messages":[{"role":"u","content":"d"}],"%s":%d,"%s":%d}' % (
        name.encode(), first, name.encode(), second,
    )  # fmt: skip


raw_requests = st.one_of(
    st.builds(deep_body, st.sampled_from((100, 255, 500, 1024, 1025, 3000)),
              st.sampled_from(("top", "content", "tools", "schema", "extra")), st.sampled_from(("[]", "{}"))),
    st.builds(bad_utf8_body, st.binary(max_size=16)),
    st.builds(duplicate_body, st.sampled_from(SAMPLING), ints, ints),
    st.sampled_from((b"", b"[]", b"null", b"1", b'"x"', b"true", b"[1,2]", b"1e999", b"-0", b"{}", b"{")),
    st.binary(max_size=64),
).map(lambda body: Hostile("raw", CHAT, body))  # fmt: skip
huge_requests = st.builds(huge_body, st.integers(1, 3), st.sampled_from(("content", "model", "user"))).map(
    lambda body: Hostile("huge", CHAT, body)
)
# huge bodies are one branch in ~ten: a few examples, a few MB each
hostile_requests = st.builds(
    lambda request, hdrs, chunked: Hostile(request.kind, request.path, request.body, hdrs, chunked),
    st.one_of(json_requests(), json_requests(), json_requests(), json_requests(), json_requests(), raw_requests,
              raw_requests, raw_requests, raw_requests, huge_requests),
    headers,
    st.booleans(),
)  # fmt: skip


def send(base: str, request: Hostile, timeout_s: float = 30) -> int | None:
    """POST raw bytes (headers too); the status, or None when no HTTP answer came back."""
    host, port = base.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=timeout_s)
    try:
        conn.putrequest("POST", request.path, skip_accept_encoding=True)
        conn.putheader("Content-Type", "application/json")
        for name, value in request.headers:
            conn.putheader(name, value)
        if request.chunked:
            conn.putheader("Transfer-Encoding", "chunked")
            conn.endheaders()
            step = max(1, len(request.body) // 3)
            for i in range(0, len(request.body), step):
                piece = request.body[i : i + step]
                conn.send(b"%x\r\n%s\r\n" % (len(piece), piece))
            conn.send(b"0\r\n\r\n")
        else:
            conn.putheader("Content-Length", str(len(request.body)))
            conn.endheaders(request.body)
        response = conn.getresponse()
        response.read()
        return response.status
    except (OSError, http.client.HTTPException):
        return None
    finally:
        conn.close()


def normal_request(i: int) -> Hostile:
    body = b'{"model":"sim-model","max_tokens":1,"user":"normal-%d","messages":[{"role":"user","content":"ping"}]}'
    return Hostile("normal", CHAT, body % i)


# each sends one hostile and one normal request (about 5 s in all); LLMREPLAY_HOSTILE_EXAMPLES=5000 for a soak
HOSTILE_EXAMPLES = int(os.environ.get("LLMREPLAY_HOSTILE_EXAMPLES", "300"))
INT_RANGES = {"max_tokens": (0, 2**31 - 1), "n": (-(2**15), 2**15 - 1), "seed": (-(2**63), 2**63 - 1)}


def expected_sampling(body: bytes) -> dict[str, str]:
    """What the row must hold for each sampling column: 'kept', 'named' (null + in invalid_fields) or
    'null' (a value of the wrong type, dropped unnamed). The recorder's own parser reads the body."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return {}
    if not isinstance(data, dict):
        return {}
    values = {
        "max_tokens": data.get(
            "max_completion_tokens", data.get("max_tokens", data.get("max_output_tokens"))
        ),
        "n": data.get("n"),
        "seed": data.get("seed"),
        "temperature": data.get("temperature"),
        "top_p": data.get("top_p"),
    }
    expected = {}
    for name, value in values.items():
        if value is None or isinstance(value, bool):
            expected[name] = "null"
        elif name in INT_RANGES:
            low, high = INT_RANGES[name]
            if isinstance(value, float) and value.is_integer() and abs(value) >= 2**63:
                value = int(value)  # an integer beyond 64 bits, which orjson reads as a float
            expected[name] = (
                "null" if not isinstance(value, int) else "kept" if low <= value <= high else "named"
            )
        elif isinstance(value, int | float):
            number = float(value)
            expected[name] = "kept" if math.isfinite(number) and abs(number) <= FLOAT32_MAX else "named"
        else:
            expected[name] = "null"
    return expected


def is_utf8(value: bytes) -> bool:
    try:
        value.decode()
    except UnicodeDecodeError:
        return False
    return True


@pytest.mark.e2e
def test_hostile_requests_never_stop_forwarding_and_all_are_filed(processes, start_sim, tmp_path):
    sim = start_sim(*FAST_SIM)
    out = tmp_path / "trace"
    base, proc = start_recorder(
        processes, tmp_path, sim, out, "--content", "--session-header", SESSION_HEADER
    )
    sent: list[tuple[Hostile, int | None]] = []  # in arrival order: the recorder's request ids count them
    started = time.monotonic()

    @settings(max_examples=HOSTILE_EXAMPLES, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])  # fmt: skip
    @given(hostile_requests)
    def hostile_then_normal(request: Hostile) -> None:
        sent.append((request, send(base, request, timeout_s=10)))
        normal = normal_request(len(sent))
        status = send(base, normal)
        sent.append((normal, status))
        assert status == 200, f"{status} after {request.kind} {request.headers} {request.body[:200]!r}"

    hostile_then_normal()
    elapsed = time.monotonic() - started
    stop(proc)
    log_text = recorder_log(tmp_path)
    assert DONE_LINE in log_text and "the converter died" not in log_text
    seen = re.search(r"stopped: ([\d,]+) LLM requests seen, ([\d,]+) journaled", log_text)
    seen_count = int(seen[1].replace(",", "")) if seen else None
    assert seen_count == len(sent), (seen and seen[0], len(sent))

    # every file the recorder wrote is readable; match rows to requests by the recorder's request id
    files = trace_files(out)
    for path in files:
        run_cli("inspect", str(path))
    table = read_trace(out).table
    rows = {r["request_id"]: r for r in table.to_pylist()}
    token = next(iter(rows)).rsplit("-", 1)[0]
    rejected = {d["request_id"]: d["reason"] for d in dead_letters(out)}
    dropped = set(re.findall(r"capture (\S+) not journaled", log_text))
    assert not dropped and not rejected, (sorted(dropped)[:5], list(rejected.items())[:3])
    assert len(rows) == len(sent) == seen_count
    for number, (request, status) in enumerate(sent, start=1):
        request_id = f"{token}-{number}"
        where = [request_id in rows, request_id in rejected, request_id in dropped]
        assert where.count(True) == 1, (request_id, request.kind, request.body[:200], where)
        if request.kind == "normal":
            assert request_id in rows and rows[request_id]["http_status"] == 200
        if request_id not in rows:
            continue
        row = rows[request_id]
        # the client saw the upstream's status; or mitmproxy's own 502 (the upstream hung up: no status
        # recorded); or nothing, when it gave up first
        assert row["http_status"] == status or status is None or (status == 502 and row["http_status"] is None), (
            request_id, status, row["http_status"], row["error_kind"],
        )  # fmt: skip
        if any(n == "Content-Encoding" for n, _ in request.headers):
            continue  # the recorder read the decoded body, if mitmproxy could decode it
        named = set(row["invalid_fields"] or ())
        for column, want in expected_sampling(request.body).items():
            assert (row[column] is None) == (want != "kept"), (column, want, row[column], request.body[:300])
            assert (column in named) == (want == "named"), (column, want, named, request.body[:300])

    hostile = sum(1 for r, _ in sent if r.kind != "normal")
    answered = sum(1 for _, s in sent if s is not None)
    assert proc.returncode == 0
    reasons = sorted(
        {reason.split(":")[0] + ":" + reason.split(":", 1)[1][:40] for reason in rejected.values()}
    )
    print(
        f"\nhostile: {hostile} hostile + {len(sent) - hostile} normal requests in {elapsed:.1f}s, {answered} "
        f"answered; {len(rows)} rows in {len(files)} files, {len(rejected)} dead letters {reasons}, "
        f"{len(dropped)} not journaled"
    )


# -- 3. in-process reproductions of conversion bugs the hostile tests found ------------------
@pytest.fixture(scope="module")
def converters(tmp_path_factory):
    """Real converters (shape and content), fed frames directly: the converter's code path without the proxy."""
    from recorder.converter import Converter
    from recorder.converter_spec import ConverterSpec

    made = {}
    for content in (False, True):
        out = tmp_path_factory.mktemp("content" if content else "shape")
        spec = ConverterSpec(
            out_dir=str(out), run_token="bug", parent_pid=os.getpid(), tokenizer=TOKENIZER, key=b"k" * 32,
            block_size=4, content=content, session_from_user=False, max_sessions=100, flush_interval_s=0.5,
            rotate_s=None, rotate_bytes=None, stats_interval_s=60.0,
        )  # fmt: skip
        made[content] = Converter(spec)
    yield made
    for converter in made.values():
        os.close(converter._lock_fd)


ANSWER = orjson.dumps(
    {
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1},
    }
)


def capture(body: bytes, endpoint: str = "chat_completions", status: int = 200, retry_after=None):
    from recorder.capture import Capture

    now = time.perf_counter_ns()
    cap = Capture(f"bug-{now}", endpoint, now, time.time_ns(), 1 << 20)
    cap.request_body, cap.status, cap.retry_after = body, status, retry_after
    cap.content_type = "application/json"
    cap.headers_ns, cap.reads, cap.end_ns = now + 1_000, [(now + 2_000, ANSWER)], now + 3_000
    cap.outcome = "response"
    return cap


def convert(converter, cap) -> tuple[dict | None, str | None]:
    """The row the converter files for `cap`, or None and the dead letter's reason."""
    from recorder.frames import HEAD, encode_capture

    frame = encode_capture(cap)
    kind, meta_len, _ = HEAD.unpack_from(frame)
    meta, blob = frame[HEAD.size : HEAD.size + meta_len], frame[HEAD.size + meta_len :]
    before = converter.dead_letters.count
    row = converter._convert((kind, meta, blob), converter.builder, set())
    reasons = dead_letters(converter.out_dir)
    return row, reasons[-1]["reason"] if converter.dead_letters.count > before else None


NESTED_300 = b"[" * 300 + b"]" * 300
DEAD_LETTERED = [
    # message_text iterates `tool_calls or ()`: a number there raises TypeError
    pytest.param("chat_completions", b'{"messages":[{"role":"user","content":"x","tool_calls":5}]}', False,
                 id="tool_calls-is-a-number"),
    # prefix_block_hashes packs token ids with array("I"): a negative id or one >= 2**32 raises OverflowError
    pytest.param("completions", b'{"model":"m","prompt":[-1,5]}', False, id="prompt-token-id-negative"),
    pytest.param("embeddings", b'{"model":"m","input":[4294967296]}', False, id="input-token-id-2^32"),
    # orjson.dumps stops at 254 levels (JSONEncodeError is a TypeError, _parse_request catches ValueError)
    pytest.param("chat_completions", b'{"messages":[],"tools":[%s]}' % NESTED_300, False, id="tools-nested-300"),
    pytest.param("chat_completions",
                 b'{"messages":[],"response_format":{"type":"json_schema","json_schema":%s}}' % NESTED_300,
                 False, id="schema-nested-300"),
    pytest.param("chat_completions", b'{"messages":[{"role":"user","content":%s}]}' % NESTED_300, True,
                 id="content-trace-message-nested-300"),
]  # fmt: skip


@pytest.mark.parametrize(("endpoint", "body", "content"), DEAD_LETTERED)
def test_every_capture_becomes_a_row(converters, endpoint, body, content):
    row, reason = convert(converters[content], capture(body, endpoint, status=400))
    assert row is not None, f"dead-lettered: {reason}"


def test_a_retry_after_of_1e306_seconds_is_named_not_dead_lettered(converters):
    row, reason = convert(converters[False], capture(b'{"messages":[]}', status=429, retry_after="1e306"))
    assert row is not None, f"dead-lettered: {reason}"  # OverflowError: cannot convert float infinity
    assert row["retry_after_ms"] is None and row["invalid_fields"] == ["retry_after_ms"]


def test_retry_after_beyond_int64_is_named(converters):
    row, _ = convert(
        converters[False], capture(b'{"messages":[]}', status=429, retry_after=ABSURD_RETRY_AFTER)
    )
    assert row["retry_after_ms"] is None and row["invalid_fields"] == ["retry_after_ms"]


def test_seed_beyond_64_bits_is_named(converters):
    row, _ = convert(converters[False], capture(b'{"messages":[],"seed":1180591620717411303424}'))
    assert row["seed"] is None and "seed" in (row["invalid_fields"] or ())


HEADER_SLOTS = {  # header -> the Capture slot its first value goes to
    b"x-session-id": "session_value",  # a request header: any client can send it
    b"content-type": "content_type",  # response headers: any upstream can
    b"retry-after": "retry_after",
    b"content-encoding": "content_encoding",
}


@pytest.mark.parametrize("header", HEADER_SLOTS)
def test_a_non_utf8_header_value_is_journaled(header):
    """A header value that is not UTF-8 was decoded to lone surrogates, which the journal's orjson meta
    refused: the capture was dropped ("capture ... not journaled")."""
    from recorder.addon import _first_values
    from recorder.frames import encode_capture

    value = _first_values([(header.title(), b"caf\xe9")], frozenset({header}))[header]
    cap = capture(b'{"messages":[]}')
    setattr(cap, HEADER_SLOTS[header], value)
    encode_capture(cap)  # was: TypeError: str is not valid UTF-8: surrogates not allowed
