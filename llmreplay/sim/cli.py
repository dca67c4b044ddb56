"""The `llmreplay sim` click command: parse flags, build a SimConfig, run the server.

Flags default to None (= not given) so the config dataclass holds the only defaults.
"""

from __future__ import annotations

import click


def _opt(*names_kind_help):
    *names, kind, help_text = names_kind_help
    return click.option(*names, type=kind, default=None, help=help_text)


@click.command()
@_opt("--host", str, "Address to listen on [default: 127.0.0.1].")
@_opt("--port", click.IntRange(0, 65535), "Port to listen on [default: 8000].")
@_opt(
    "--profile", str, "Engine profile: 'fast', 'slow' or a TOML file whose keys are the flag names with '_'."
)
@_opt(
    "--log", "log_path", str, "Ground-truth Parquet (one row per request); steps go to <stem>.steps.parquet."
)
@click.option(
    "--model", "models", multiple=True, help="Model name to serve (repeatable) [default: sim-model]."
)
@_opt("--seed", int, "Seed for output lengths, faults and spikes [default: 0].")
@_opt(
    "--tokenizer",
    str,
    "Tokenizer counting prompt tokens: mistral-tekken, tiktoken:<enc>, tokenizer.json [default: mistral-tekken].",
)
@_opt("--message-overhead-tokens", int, "Tokens added per chat message, like a chat template [default: 0].")
@_opt("--max-num-seqs", int, "Batch slots: sequences running at once.")
@_opt("--kv-cache-tokens", int, "KV budget in tokens; a request reserves prompt + output tokens.")
@_opt(
    "--max-prefill-tokens-per-step", int, "Uncached prompt tokens admitted per step (at least one request)."
)
@_opt("--prefill-ns-per-token", int, "Step time per uncached prompt token, in nanoseconds.")
@_opt("--decode-base-ms", float, "Fixed time of every step, in milliseconds.")
@_opt("--decode-per-seq-ms", float, "Step time per running sequence, in milliseconds.")
@_opt("--prefix-cache-blocks", int, "Prefix cache size in blocks (0 disables it).")
@_opt("--block-size", int, "Prefix block size in tokens, as in llmreplay.prefix_hash [default: 512].")
@_opt("--max-waiting", int, "Waiting-queue limit; beyond it requests get 429 with Retry-After.")
@_opt("--retry-after-s", int, "Retry-After seconds sent with 429.")
@_opt("--output-len-dist", click.Choice(["fixed", "uniform", "lognormal"]), "Output length when not forced.")
@_opt("--output-len-median-tokens", int, "Median (lognormal) or value (fixed) of the output length.")
@_opt("--output-len-sigma", float, "Lognormal shape of the output length.")
@_opt("--output-len-min-tokens", int, "Shortest drawn output.")
@_opt("--output-len-max-tokens", int, "Longest drawn output.")
@_opt("--reasoning-tokens", int, "Median reasoning tokens before each chat answer [default: 0, none].")
@_opt("--reasoning-tokens-sigma", float, "Lognormal shape of the reasoning length [default: 0, fixed].")
@_opt(
    "--reasoning-field",
    click.Choice(["reasoning", "reasoning_content"]),
    "Delta key of reasoning: reasoning (vLLM, Ollama) or reasoning_content (SGLang, llama.cpp).",
)
@_opt("--error-rate", float, "Share of requests answered with --error-status at once.")
@_opt("--error-status", click.Choice(["500", "503"]), "Status for --error-rate [default: 500].")
@_opt("--cut-rate", float, "Share of streams cut mid-response (connection aborted).")
@_opt("--stream-error-rate", float, "Share of streams sending an SSE error object inside the 200 stream.")
@_opt("--spike-rate", float, "Share of engine steps that take --spike-ms longer.")
@_opt("--spike-ms", float, "Extra time of a spiked step, in milliseconds.")
@_opt("--slow-first-token-ms", float, "Delay before a request enters the engine, in milliseconds.")
@_opt("--slow-first-token-rate", float, "Share of requests delayed by --slow-first-token-ms [default: 1].")
@_opt(
    "--loop",
    "event_loop",
    click.Choice(["uvloop", "asyncio"]),
    "Event loop implementation [default: uvloop].",
)
def sim(profile, error_status, **flags):
    """Serve a simulated OpenAI-compatible engine (continuous batching, prefix cache, faults).

    Ready when GET /health answers 200. Test hook: the request header X-Sim-Fault forces a
    fault (llmreplay/sim/faults.py FAULTS; an unknown value is answered with the list).
    """
    from llmreplay.sim.config import build_config
    from llmreplay.sim.run import run_sim

    flags["error_status"] = int(error_status) if error_status else None
    config = build_config(profile, flags)
    run_sim(config)
