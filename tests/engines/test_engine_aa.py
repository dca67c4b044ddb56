"""The A/A test (issue 25, deliverable 4): the same engine under the same traffic must read "no change".

Production: the official openai SDK (AsyncOpenAI) sending streamed chat requests open-loop and bursty
through `llmreplay record --session-header X-Session-Id --tokenizer <the engine's tokenizer.json>` to
the real vLLM (prefix caching on, cached tokens in usage); the recorder stopped with SIGINT; then
`llmreplay replay` of the recording against the same engine (sessions and think time mirrored) and
`llmreplay compare`. One production of both traffic kinds at once (single-turn on three long shared
system prompts, and 3-turn conversations sending back the assistant's actual answers: aa.MIXED), two
variants (the shape trace; a --content recording through `anonymize --verify`). The scenario and its
measurements: aa_scenario.py (shared with benchmarks/aa_fidelity.py, which also runs each kind alone).

Asserted per variant and kind: compare reads GO (exit 0) and the replay faithful; TTFT/TPOT/E2E p50 replay/production
within this engine's measured A/A spread (ENGINE_TEST_RATIO_RANGE; the benchmark reports them against 0.9-1.1);
cached-token share (sum cached / sum prompt tokens) within 2 points of production's; each request's
reusable prefix (longest prefix, in the engine's own tokens, shared with any earlier request) within
16 tokens of production's for >= 95% of requests.

A phase that fails on latency alone while every fidelity figure holds is measured once more, on new
prefixes, and judged on that second pair (its notes keep the first's failures): on a shared 2-core
machine one A/A pair can be perturbed by other work; a fidelity failure is never measured again.

vLLM only: llama-server's usage carries no cached_tokens and its /tokenize takes no chat messages.
The engine is pinned to one core, this process and everything it starts to the other.
"""

from __future__ import annotations

import aa_scenario as aa
import pytest
from engine_client import record_figure

pytestmark = [pytest.mark.engines, pytest.mark.timeout(2400)]

PHASES = [(v, aa.MIXED) for v in aa.VARIANTS]  # each variant's single requests and conversations at once


def _llama_skip_reason(engine) -> str:
    """Why llama-server cannot take the A/A: whether its usage reports cached prompt tokens, probed."""
    from engine_client import http_json

    body = {"model": engine.model, "max_tokens": 1, "messages": [{"role": "user", "content": "cache probe " * 300}]}
    details = None
    for _ in range(2):  # the second finds the first's prompt cached, if the engine says so
        status, answer = http_json("POST", engine.url("/v1/chat/completions"), body)
        if status != 200 or not isinstance(answer, dict):
            return f"{engine.name} answered the cache probe with HTTP {status}"
        details = (answer.get("usage") or {}).get("prompt_tokens_details")
    if not details or details.get("cached_tokens") is None:
        return (f"{engine.name}'s usage reports no prompt_tokens_details.cached_tokens (its prompt cache shows "
                "only as timings.cache_n): no cached-token share to compare")
    return (f"{engine.name} reports cached tokens, but the A/A measures prefixes with the engine's chat-message "
            "/tokenize and hands the recorder its tokenizer.json; llama-server has neither")


@pytest.fixture(scope="module")
def aa_results(engine, tmp_path_factory) -> dict[tuple[str, str], aa.PhaseResult]:
    if engine.name != "vllm":
        pytest.skip(_llama_skip_reason(engine))
    work = tmp_path_factory.mktemp(f"aa-{engine.name}")
    with aa.pinned(engine.proc.pid):
        results = aa.run_all(engine.base_url, engine.model, str(engine.model_dir / "tokenizer.json"), aa.TEST,
                             work, kinds=(aa.MIXED,))
    for (variant, kind), res in results.items():
        record_figure(engine.name, f"aa_{variant}_{kind}", {
            "compare": f"exit {res.compare_exit}: {res.compare_verdict}",
            "p50_ratios": {m: round(v[2], 3) for m, v in res.p50.items()},
            "cached_share": [round(res.cached_production, 4), round(res.cached_replay, 4)],
            "prefix_within_16": round(res.prefix_within, 3),
            "prefix_abs_diff_p50_p90": [res.prefix_diff_p50, res.prefix_diff_p90],
        })
    return results


@pytest.fixture(params=PHASES, ids=[f"{v}-{k}" for v, k in PHASES])
def phase(request, aa_results) -> aa.PhaseResult:
    return aa_results[request.param]


def test_production_and_replay_both_complete(phase):
    assert phase.requests > 0 and phase.production_ok == phase.requests, phase.notes
    assert phase.replayed == phase.requests and phase.replayed_ok == phase.replayed, (
        phase.replay_verdict, phase.notes)


def test_the_anonymized_trace_passes_its_own_verification(phase):
    if phase.variant != "anonymized":
        pytest.skip("the shape variant anonymizes nothing")
    assert phase.anonymize_exit == 0, phase.notes


def test_compare_reads_go_and_the_replay_faithful(phase):
    """The gate's fidelity rows (cache included) hold, and its latency cells call no change significant:
    the A/A noise of requests that share the engine's fate is resampled in blocks (docs/design/paired-bootstrap.md)."""
    assert phase.compare_exit == 0 and "replay faithful" in phase.compare_verdict, (
        phase.compare_verdict, phase.compare_reasons, phase.notes)


@pytest.mark.parametrize("metric", ["ttft", "tpot", "e2e"])
def test_latency_p50_ratio_is_one(phase, metric):
    assert metric in phase.p50, (phase.compare_verdict, phase.notes)
    production, replay, ratio = phase.p50[metric]
    low, high = aa.ENGINE_TEST_RATIO_RANGE
    assert low <= ratio <= high, f"{metric} p50 {production:.1f} ms -> {replay:.1f} ms (x{ratio:.3f})"


def test_cached_token_share_is_production_s(phase):
    diff = phase.cached_replay - phase.cached_production
    assert abs(diff) <= aa.CACHED_SHARE_POINTS, (
        f"cached share: production {phase.cached_production:.1%}, replay {phase.cached_replay:.1%}")


def test_every_request_reuses_the_prefix_it_reused_in_production(phase):
    assert phase.prefix_within >= aa.PREFIX_WITHIN_SHARE, (
        f"within {aa.PREFIX_TOLERANCE_TOKENS} tokens: {phase.prefix_within:.1%} ({phase.prefix_pairs} paired of "
        f"{phase.production_ok}); |difference| p50 {phase.prefix_diff_p50:.0f}, p90 {phase.prefix_diff_p90:.0f} "
        f"tokens", phase.notes)
