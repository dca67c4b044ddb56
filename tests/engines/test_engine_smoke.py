"""Real engines answer as engines.md says, and a first end-to-end replay through the CLI.

Each test runs once per engine (`engine` is parametrized: vLLM, then llama.cpp). The first part
talks to the engine directly (chat plain and streamed, forced output lengths, /metrics names,
/tokenize, prefix cache); the second imports a Mooncake slice with `llmreplay import mooncake`,
replays it with `llmreplay replay` (no engine or tokenizer flag: detection and the target's own
/tokenize are under test), once as recorded and once at `--scale 2`, and reads results.parquet with
pyarrow; the engine's /metrics histograms, scraped around the first replay, are held against the
client's TTFT and ITL.
"""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from engine_client import (
    MAX_DISPATCH_LAG,
    MAX_MODEL_LEN,
    REPO,
    histogram_buckets,
    histogram_delta,
    http_json,
    http_text,
    neighbour_edges,
    rank_bucket,
    record_figure,
    sse_events,
)

from llmreplay.metrics import itl_values_ns, per_request_latencies_ns

pytestmark = [pytest.mark.engines, pytest.mark.timeout(900)]

MESSAGES = [
    {"role": "system", "content": "You are a terse assistant."},
    {"role": "user", "content": "Name three rivers of Europe and say which is longest."},
]

# Prometheus names each engine must expose (engines.md); histograms appear as NAME_bucket.
METRIC_NAMES = {
    "vllm": [
        "vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
        "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total", "vllm:num_preemptions_total",
        "vllm:time_to_first_token_seconds_bucket", "vllm:inter_token_latency_seconds_bucket",
        "vllm:e2e_request_latency_seconds_bucket", "vllm:request_queue_time_seconds_bucket",
    ],
    "llama.cpp": [
        "llamacpp:requests_processing", "llamacpp:requests_deferred", "llamacpp:n_busy_slots_per_decode",
    ],
}


def force_length(engine, n: int) -> dict:
    """The request fields that make the engine generate exactly n tokens."""
    if engine.name == "vllm":
        return {"ignore_eos": True, "min_tokens": n, "max_tokens": n}
    return {"ignore_eos": True, "n_predict": n}


def chat(engine, timeout: float = 300.0, **fields) -> dict:
    status, body = http_json("POST", engine.url("/v1/chat/completions"),
                             {"model": engine.model, "messages": MESSAGES, **fields}, timeout=timeout)
    assert status == 200, f"{engine.name}: HTTP {status}: {body}"
    return body


def long_text(words: int, salt: str) -> str:
    """A deterministic prompt of about `words` words (salted, so runs do not share a cache by accident)."""
    vocab = ("river mountain lantern orchard copper violet meadow harbor signal canyon ember quartz "
             "willow falcon tundra marble cedar beacon").split()
    return salt + " " + " ".join(vocab[(i * 7 + i // 5) % len(vocab)] for i in range(words))


# --- the engine itself ------------------------------------------------------------------------------


def test_models_lists_the_served_name(engine):
    status, body = http_json("GET", engine.url("/v1/models"))
    assert status == 200, body
    ids = [m["id"] for m in body["data"]]
    assert engine.model in ids, ids
    owned_by = {m["id"]: m.get("owned_by") for m in body["data"]}[engine.model]
    record_figure(engine.name, "owned_by", owned_by)
    assert owned_by == {"vllm": "vllm", "llama.cpp": "llamacpp"}[engine.name]


def test_plain_chat_completion(engine):
    body = chat(engine, max_tokens=8)
    choice = body["choices"][0]
    assert choice["message"]["role"] == "assistant"
    assert isinstance(choice["message"]["content"], str)
    assert choice["finish_reason"] in ("length", "stop")
    usage = body["usage"]
    assert usage["prompt_tokens"] > 10
    assert 1 <= usage["completion_tokens"] <= 8
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


def test_streamed_chat_completion(engine):
    n = 24
    events = list(sse_events(engine.url("/v1/chat/completions"),
                             {"model": engine.model, "messages": MESSAGES, **force_length(engine, n),
                              "stream_options": {"include_usage": True}}))
    assert events[-1] == "[DONE]"
    chunks = [e for e in events if isinstance(e, dict)]
    content = [c for c in chunks if c.get("choices") and c["choices"][0].get("delta", {}).get("content")]
    usage = [c["usage"] for c in chunks if c.get("usage")]
    assert content, f"{engine.name}: no content chunk in {chunks[:3]}"
    assert usage, f"{engine.name}: no usage chunk although stream_options.include_usage was set"
    assert usage[-1]["completion_tokens"] == n
    finish = [c["choices"][0].get("finish_reason") for c in chunks if c.get("choices")]
    assert "length" in finish, finish
    # SSE content chunks are not tokens: count from usage (engines.md: 36 chunks for 37 tokens).
    record_figure(engine.name, f"stream_content_chunks_for_{n}_tokens", len(content))
    assert n - 4 <= len(content) <= n, len(content)


@pytest.mark.parametrize("n", [1, 17, 200])
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_forced_output_length_is_exact(engine, n, stream):
    fields = force_length(engine, n)
    if stream:
        events = list(sse_events(engine.url("/v1/chat/completions"),
                                 {"model": engine.model, "messages": MESSAGES, **fields,
                                  "stream_options": {"include_usage": True}}))
        got = [e["usage"]["completion_tokens"] for e in events if isinstance(e, dict) and e.get("usage")][-1]
    else:
        got = chat(engine, **fields)["usage"]["completion_tokens"]
    assert got == n, f"{engine.name}: asked {fields}, got {got} tokens"


def test_metrics_expose_the_expected_names(engine):
    chat(engine, max_tokens=4)  # so every histogram has an observation
    status, text = http_text(engine.url("/metrics"))
    assert status == 200, text[:300]
    names = {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line and not line.startswith("#")}
    missing = [n for n in METRIC_NAMES[engine.name] if n not in names]
    assert not missing, f"{engine.name} /metrics lacks {missing}; it has {sorted(names)[:60]}"


def test_tokenize_counts_as_the_engine_does(engine):
    text = "Hello world, this is a tokenizer check with numbers 12345 and ünïcode."
    msgs = [{"role": "user", "content": text}]
    usage = chat(engine, messages=msgs, max_tokens=1)["usage"]
    if engine.name == "vllm":
        from tokenizers import Tokenizer

        status, body = http_json("POST", engine.url("/tokenize"), {"model": engine.model, "prompt": text,
                                                                   "add_special_tokens": False})
        assert status == 200, body
        local = Tokenizer.from_file(str(engine.model_dir / "tokenizer.json"))
        assert body["tokens"] == local.encode(text, add_special_tokens=False).ids
        status, body = http_json("POST", engine.url("/tokenize"), {"model": engine.model, "messages": msgs,
                                                                   "add_generation_prompt": True})
        assert status == 200, body
        assert body["count"] == usage["prompt_tokens"], (body, usage)
        record_figure(engine.name, "chat_template_overhead_tokens", body["count"] - len(local.encode(text).ids))
    else:
        status, body = http_json("POST", engine.url("/tokenize"), {"content": text})
        assert status == 200, body
        assert body["tokens"] and all(isinstance(t, int) for t in body["tokens"])
        status, tmpl = http_json("POST", engine.url("/apply-template"), {"messages": msgs})
        assert status == 200, tmpl
        status, whole = http_json("POST", engine.url("/tokenize"), {"content": tmpl["prompt"],
                                                                    "add_special": True, "parse_special": True})
        assert status == 200, whole
        assert len(whole["tokens"]) == usage["prompt_tokens"], (len(whole["tokens"]), usage)
        record_figure(engine.name, "chat_template_overhead_tokens", len(whole["tokens"]) - len(body["tokens"]))


def test_a_repeated_prompt_reports_cached_tokens(engine):
    msgs = [{"role": "user", "content": long_text(600, f"cache-check {time.time_ns()}")}]
    first = chat(engine, messages=msgs, max_tokens=2)
    second = chat(engine, messages=msgs, max_tokens=2)
    prompt = second["usage"]["prompt_tokens"]
    cached = (second["usage"].get("prompt_tokens_details") or {}).get("cached_tokens")
    record_figure(engine.name, "repeat_prompt_cached_tokens", f"{cached} of {prompt}")
    # The first time only the chat template's header can be cached (llama.cpp reuses a slot's prefix).
    assert ((first["usage"].get("prompt_tokens_details") or {}).get("cached_tokens") or 0) < 64, first["usage"]
    if engine.name == "vllm":
        # Whole 128-token blocks on CPU, and never the last token (it must be recomputed).
        assert cached and cached % 128 == 0 and prompt - 128 <= cached < prompt, (cached, prompt)
    else:
        assert second["timings"]["cache_n"] == prompt - 1, second["timings"]
        assert cached == second["timings"]["cache_n"], (cached, second["timings"])


def test_a_prompt_longer_than_the_context_is_refused(engine):
    msgs = [{"role": "user", "content": long_text(MAX_MODEL_LEN + 500, "too long")}]
    status, body = http_json("POST", engine.url("/v1/chat/completions"),
                             {"model": engine.model, "messages": msgs, "max_tokens": 4})
    record_figure(engine.name, "overlong_prompt_answer", f"HTTP {status}: {json.dumps(body)[:160]}")
    assert status == 400, (status, body)


# --- end to end through the CLI ---------------------------------------------------------------------

MOONCAKE = REPO / "samples" / "public" / "mooncake_conversation_head400.jsonl"
SLICE_ROWS = 40
SPEED = "2"
SHORT_ROWS = 20  # the further replays of the slice take its first half: make test-engines stays under 5 min
# A request must fit the 8192-token context even when its prompt is spelled 2.5x too long (issue #15
# measured +135% at p90 on vLLM with another tokenizer): rows longer than that are left out of the slice.
FIT_FACTOR = 2.5
# Issue #15: the engine counts the recorded prompt length for this share of requests, the rest within 1%.
EXACT_PROMPT_SHARE = 0.99
NEAR_PROMPT_REL = 0.01
# The first prefix block of a request replayed at --scale 2 may be found in another request's cache
# only for the chat template's header (llama.cpp reuses a slot's prefix; vLLM's salt makes it 0).
TEMPLATE_HEADER_TOKENS = 64


@dataclass
class Replay:
    engine: str
    rc: int
    out: str
    run_dir: Path
    rows: list[dict]
    run: dict
    trace_rows: list[dict]
    seconds: float
    metrics_before: str  # the engine's /metrics just before and just after the replay
    metrics_after: str


@pytest.fixture(scope="session")
def mooncake_slice(tmp_path_factory, llmreplay_bin) -> Path:
    """The first 40 Mooncake conversation rows that fit the context, imported as a shape trace."""
    folder = tmp_path_factory.mktemp("mooncake")
    rows = [json.loads(line) for line in MOONCAKE.read_text().splitlines() if line.strip()]
    chosen = [r for r in rows if r["input_length"] * FIT_FACTOR + r["output_length"] <= MAX_MODEL_LEN - 192]
    chosen = chosen[:SLICE_ROWS]
    assert len(chosen) == SLICE_ROWS
    src = folder / "slice.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in chosen))
    trace = folder / "slice.parquet"
    proc = subprocess.run([str(llmreplay_bin), "import", "mooncake", str(src), "-o", str(trace)],
                          cwd=folder, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return trace


def scrape_metrics(engine) -> str:
    status, text = http_text(engine.url("/metrics"))
    assert status == 200, f"{engine.name} /metrics: HTTP {status}: {text[:300]}"
    return text


def run_replay(llmreplay_bin: Path, trace: Path, engine, out: Path, *extra: str, rows: int = SLICE_ROWS) -> Replay:
    cmd = [str(llmreplay_bin), "replay", str(trace), "--target", engine.base_url, "-o", str(out),
           "--speed", SPEED, "--limit", str(rows),
           "--max-dispatch-lag", MAX_DISPATCH_LAG, "--quiet", *extra]
    metrics_before = scrape_metrics(engine)
    t0 = time.monotonic()
    proc = subprocess.run(cmd, cwd=out.parent, capture_output=True, text=True, timeout=800)
    seconds = time.monotonic() - t0
    metrics_after = scrape_metrics(engine)
    text = proc.stdout + proc.stderr
    if not (out / "results.parquet").is_file() or not (out / "run.json").is_file():
        pytest.fail(f"replay wrote no results.parquet + run.json (exit {proc.returncode}):\n{text[-3000:]}", pytrace=False)
    return Replay(engine=engine.name, rc=proc.returncode, out=text, run_dir=out,
                  rows=pq.read_table(out / "results.parquet").to_pylist(),
                  run=json.loads((out / "run.json").read_text()),
                  trace_rows=pq.read_table(trace).to_pylist(), seconds=seconds,
                  metrics_before=metrics_before, metrics_after=metrics_after)


@pytest.fixture(scope="session")
def replay(engine, mooncake_slice, llmreplay_bin, tmp_path_factory) -> Replay:
    """The Mooncake slice replayed against the engine with no engine or tokenizer flag."""
    out = tmp_path_factory.mktemp(f"replay-{engine.name}") / "run"
    r = run_replay(llmreplay_bin, mooncake_slice, engine, out)
    record_figure(engine.name, "replay_s", round(r.seconds, 1))
    record_figure(engine.name, "replay_exit", r.rc)
    record_figure(engine.name, "replay_verdict", r.out.strip().splitlines()[-1] if r.out.strip() else "")
    return r


def quantile(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def prompt_mismatch(rows: list[dict]) -> dict:
    rel = [r["prompt_tokens"] / r["recorded_prompt_tokens"] - 1 for r in rows]
    diff = [r["prompt_tokens"] - r["recorded_prompt_tokens"] for r in rows]
    return {"rel_p50": round(quantile(rel, 0.5), 4), "rel_p90": round(quantile(rel, 0.9), 4),
            "abs_p50": quantile(diff, 0.5), "abs_p90": quantile(diff, 0.9), "min": min(diff), "max": max(diff)}


def test_replay_every_request_succeeded(replay):
    assert len(replay.rows) == SLICE_ROWS, replay.out
    bad = [(r["request_id"], r["http_status"], r["error_kind"], r["error_detail"]) for r in replay.rows
           if r["http_status"] != 200 or r["error_kind"] is not None]
    assert not bad, bad


def test_replay_output_lengths_equal_the_trace(replay):
    by_id = {r["request_id"]: r for r in replay.trace_rows}
    off = [(r["request_id"], r["completion_tokens"], by_id[r["source_request_id"]]["completion_tokens"],
            r["finish_reason"]) for r in replay.rows
           if r["completion_tokens"] != by_id[r["source_request_id"]]["completion_tokens"]]
    record_figure(replay.engine, "output_lengths_exact", f"{len(replay.rows) - len(off)}/{len(replay.rows)}")
    assert {r["token_source"] for r in replay.rows} == {"server_usage"}
    assert not off, off


def test_replay_detects_the_engine(replay):
    """With no --engine flag the replay finds the engine, so it sends the fields that force lengths
    (vLLM ignore_eos + min_tokens; llama.cpp ignore_eos + n_predict). Issue #14 found llama-server
    undetected (engine: openai, engine_from: default): fixed by the engine table (llmreplay/engines.py)."""
    target = replay.run["target"]
    record_figure(replay.engine, "detected", f"{target.get('engine')} (from {target.get('engine_from')})")
    assert target["engine"] == {"vllm": "vllm", "llama.cpp": "llamacpp"}[replay.engine], target


def test_replay_reports_cached_tokens_where_the_trace_shares_prefixes(replay):
    """A request whose first prefix block was already sent in an earlier request's prompt finds it cached."""
    by_id = {r["request_id"]: r for r in replay.trace_rows}
    rows = sorted(replay.rows, key=lambda r: r["sent_offset_ns"])
    seen: set = set()
    sharing, hits = 0, 0
    for r in rows:
        blocks = by_id[r["source_request_id"]]["prefix_block_hashes"] or []
        if blocks and blocks[0] in seen:
            sharing += 1
            hits += bool(r["cached_tokens"])
        seen.update(blocks)
    record_figure(replay.engine, "cached_tokens_seen",
                  f"{hits} of {sharing} requests sharing a prefix with an earlier one; values "
                  f"{sorted({r['cached_tokens'] for r in rows if r['cached_tokens']})}")
    assert sharing >= 20, sharing
    if replay.engine == "vllm":
        assert hits >= sharing - 2, (hits, sharing)  # one in flight with its prefix's first sender may miss
    else:
        # llama.cpp's cache is per slot: a request lands on a slot holding the prefix only sometimes.
        assert hits >= 1, (hits, sharing)


def assert_prompt_lengths_exact(replay: Replay, figure: str) -> None:
    """Issue #15: the engine's prompt_tokens equal the recorded ones for >= 99% of requests, the rest within 1%."""
    off = [(r["request_id"], r["recorded_prompt_tokens"], r["prompt_tokens"]) for r in replay.rows
           if r["prompt_tokens"] != r["recorded_prompt_tokens"]]
    share = 1 - len(off) / len(replay.rows)
    record_figure(replay.engine, figure, f"{len(replay.rows) - len(off)}/{len(replay.rows)} ({share:.1%})")
    far = [o for o in off if o[2] is None or abs(o[2] / o[1] - 1) > NEAR_PROMPT_REL]
    why = (f"{replay.engine}: (request, recorded, engine) {off[:8]}; the replay's own account "
           f"(run.json builder.prompt_fit, tokenizer): {replay.run.get('builder', {}).get('prompt_fit')}, "
           f"{replay.run.get('tokenizer')}")
    assert share >= EXACT_PROMPT_SHARE and not far, why


def test_replay_prompt_lengths_equal_the_trace(replay):
    assert_prompt_lengths_exact(replay, "prompt_lengths_exact")
    record_figure(replay.engine, "prompt_tokenizer", replay.run.get("tokenizer"))


def test_replay_verdict_is_faithful(replay):
    assert replay.rc == 0, replay.out[-2000:]


# --- the client's latencies beside the engine's own histograms -----------------------------------------

# The engine's histogram of each client metric: vLLM measures TTFT from the request's arrival in its
# API server and ITL between the token outputs it streams.
HISTOGRAMS = {
    "vllm": {"ttft": "vllm:time_to_first_token_seconds", "itl": "vllm:inter_token_latency_seconds"},
}


def client_values_s(replay: Replay, metric: str) -> np.ndarray:
    table = pq.read_table(replay.run_dir / "results.parquet")
    values = itl_values_ns(table) if metric == "itl" else per_request_latencies_ns(table)[metric]
    values = np.asarray(values, dtype=float)
    return np.sort(values[~np.isnan(values)]) / 1e9


@pytest.mark.parametrize("metric", ["ttft", "itl"])
def test_client_latency_agrees_with_the_engines_histogram(replay, metric):
    """The client's median, an order statistic (k = ceil(n/2); no interpolation across a gap between two
    modes), falls where the engine's histogram allows. The engine also counted the preflight's `extra`
    requests, so its own k-th replayed observation lies between its k-th and (k + extra)-th. TTFT: the
    client's includes the network, the API server's parsing and its own read loop, so it can only be later:
    at least the lower edge of the first of those buckets, at most the upper edge of the bucket above the
    second. ITL: either way by one bucket (chunks read together give the client 0 ns gaps; a busy client,
    longer ones)."""
    names = HISTOGRAMS.get(replay.engine)
    if names is None:
        assert "_bucket{" not in replay.metrics_after, "llama-server now exposes histograms: compare them"
        pytest.skip(f"{replay.engine}: its /metrics has no latency histograms (only the totals "
                    "llamacpp:prompt_seconds_total, llamacpp:tokens_predicted_seconds_total and gauges)")
    delta = histogram_delta(histogram_buckets(replay.metrics_before, names[metric]),
                            histogram_buckets(replay.metrics_after, names[metric]))
    assert delta and delta[float("inf")] >= SLICE_ROWS, (names[metric], delta)
    values = client_values_s(replay, metric)
    total, k = int(delta[float("inf")]), (len(values) + 1) // 2
    extra = total - len(values)
    first = rank_bucket(delta, max(1, min(k, k + extra)))
    last = rank_bucket(delta, min(total, max(k, k + extra)))
    client = float(values[k - 1])
    record_figure(replay.engine, f"{metric}_p50_ms_client_vs_engine_bucket",
                  f"{client * 1e3:.1f} in ({first[0] * 1e3:g}, {last[1] * 1e3:g}]")
    if metric == "itl":
        record_figure(replay.engine, "itl_client_zero_gap_share", round(float((values == 0).mean()), 3))
    low = first[0] if metric == "ttft" else neighbour_edges(delta, first)[0]
    above = neighbour_edges(delta, last)[1]
    assert low <= client <= above, (f"{metric} median (value {k} of {len(values)}): client {client * 1e3:.2f} ms; "
                                    f"the engine's values {k}..{k + extra} of {total} in ({first[0] * 1e3:g}, "
                                    f"{last[1] * 1e3:g}] ms; allowed [{low * 1e3:g}, {above * 1e3:g}] ms; "
                                    f"histogram delta {delta}")


# --- --scale 2 ------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def scaled_replay(engine, mooncake_slice, llmreplay_bin, tmp_path_factory) -> Replay:
    """The slice's first half at --scale 2: each request once more as a copy (copy_index 1)."""
    out = tmp_path_factory.mktemp(f"replay-scale2-{engine.name}") / "run"
    r = run_replay(llmreplay_bin, mooncake_slice, engine, out, "--scale", "2", rows=SHORT_ROWS)
    record_figure(engine.name, "replay_scale2_s", round(r.seconds, 1))
    return r


def test_scale2_every_request_and_copy_succeeded_with_recorded_lengths(scaled_replay):
    rows = scaled_replay.rows
    assert sorted(r["copy_index"] for r in rows) == [0] * SHORT_ROWS + [1] * SHORT_ROWS, scaled_replay.out[-2000:]
    bad = [(r["request_id"], r["http_status"], r["error_kind"], r["error_detail"]) for r in rows
           if r["http_status"] != 200 or r["error_kind"] is not None]
    assert not bad, bad
    short = [(r["request_id"], r["completion_tokens"], r["recorded_completion_tokens"]) for r in rows
             if r["completion_tokens"] != r["recorded_completion_tokens"]]
    assert not short, short


def test_scale2_copies_prompt_lengths_equal_the_trace(scaled_replay):
    """Copies are kept out of the original's cache inside the recorded length (cache_salt, or other spelling)."""
    copies = [r for r in scaled_replay.rows if r["copy_index"] == 1]
    assert_prompt_lengths_exact(dataclasses.replace(scaled_replay, rows=copies), "scale2_copy_prompt_lengths_exact")


def test_scale2_copies_share_prefixes_among_themselves_not_with_the_originals(scaled_replay):
    """A request whose first prefix block an earlier request *of its own copy* sent finds it cached; one
    whose first block only the other copy sent finds at most the template's header (vLLM: nothing)."""
    by_id = {r["request_id"]: r for r in scaled_replay.trace_rows}
    seen: dict[int, set] = {0: set(), 1: set()}
    own, own_hits, foreign = 0, 0, []
    for r in sorted(scaled_replay.rows, key=lambda r: r["sent_offset_ns"]):
        blocks = by_id[r["source_request_id"]]["prefix_block_hashes"] or []
        mine, other = seen[r["copy_index"]], seen[1 - r["copy_index"]]
        if blocks and blocks[0] in mine:
            own += 1
            own_hits += bool(r["cached_tokens"])
        elif blocks and blocks[0] in other:
            foreign.append((r["request_id"], r["cached_tokens"]))
        mine.update(blocks)
    record_figure(scaled_replay.engine, "scale2_cached_tokens_seen",
                  f"{own_hits} of {own} requests sharing a prefix within their copy; cached tokens of "
                  f"{len(foreign)} sharing only with the other copy: "
                  f"{sorted({c or 0 for _, c in foreign})}")
    assert own >= SHORT_ROWS and foreign, (own, foreign)
    limit = 0 if scaled_replay.engine == "vllm" else TEMPLATE_HEADER_TOKENS
    assert all((c or 0) <= limit for _, c in foreign), foreign
    if scaled_replay.engine == "vllm":
        assert own_hits >= own - 4, (own_hits, own)
    else:
        assert own_hits >= 1, (own_hits, own)


def test_replay_with_the_models_own_tokenizer_matches_prompt_lengths(engine, mooncake_slice, llmreplay_bin,
                                                                     tmp_path_factory):
    """vLLM only (its tokenizer.json is on disk): the mismatch left is the chat template's few tokens."""
    if engine.name != "vllm":
        pytest.skip("llama.cpp's Llama-3 vocabulary is only in the GGUF; no tokenizer.json to pass")
    out = tmp_path_factory.mktemp("replay-vllm-own-tokenizer") / "run"
    r = run_replay(llmreplay_bin, mooncake_slice, engine, out, "--tokenizer",
                   str(engine.model_dir / "tokenizer.json"), rows=SHORT_ROWS)
    m = prompt_mismatch(r.rows)
    record_figure(engine.name, "prompt_mismatch_own_tokenizer", m)
    record_figure(engine.name, "replay_own_tokenizer_exit", r.rc)
    assert all(row["http_status"] == 200 for row in r.rows)
    assert -16 <= m["min"] and m["max"] <= 16, m  # ChatML adds ~10 tokens around one user message
    assert r.rc == 0, r.out[-2000:]


def test_engine_log_has_no_traceback(engine):
    """Last (per engine): nothing above made the engine log a Python traceback or a crash."""
    text = engine.log_path.read_text(errors="replace")
    assert not re.search(r"Traceback \(most recent call last\)|Segmentation fault|core dumped", text), \
        engine.log_tail(60)
