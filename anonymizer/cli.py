"""The `llmreplay anonymize` command: its flags are built from AnonymizeConfig's fields; run, report.

Heavy imports (the pipeline: pyarrow, tokenizers) happen inside the command so `--help` stays fast.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from anonymizer.config import AnonymizeConfig
from llmreplay import options


@click.command()
@click.argument("in_trace", type=click.Path(path_type=Path))
@options.click_options(AnonymizeConfig)
@click.option(
    "--verify", is_flag=True, help="Re-read the output and prove counts, structure, sharing and no leaks."
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option("--quiet", is_flag=True, help="Print only problems.")
def anonymize(in_trace, verify, as_json, quiet, **values):
    """Replace all content of IN_TRACE with fake text of the same token lengths; keep its shape."""
    from anonymizer.pipeline import anonymize_trace

    config = options.build(AnonymizeConfig, values, input_path=in_trace)
    result = anonymize_trace(config)
    if result.generated_key_file is not None:
        click.echo(
            f"warning: wrote a new anonymization key to {result.generated_key_file}; keep it private "
            "(it links the trace to the original ids) and pass it with --key-file to anonymize "
            "more traces consistently",
            err=True,
        )
    report = None
    if verify:
        from anonymizer.verify import verify_anonymized

        report = verify_anonymized(config.input_path, config.output_path, result.tokenizer_spec, result.mode)
    if as_json:
        payload = result.to_json()
        if report is not None:
            payload["verification"] = report.to_json()
        click.echo(json.dumps(payload, indent=2))
    elif not quiet:
        click.echo(_summary(result))
        if report is not None:
            click.echo("\n".join(report.summary_lines()))
    elif report is not None and not report.ok:
        click.echo("\n".join(report.summary_lines()), err=True)
    if result.miss_count and not quiet and not as_json:
        click.echo("\n".join(f"  miss: {m}" for m in result.misses), err=True)
    if report is not None and not report.ok:
        raise SystemExit(1)  # the verification failed


def _summary(result) -> str:
    rate = result.prompt_tokens / result.cpu_s if result.cpu_s else 0.0
    lines = [
        f"anonymized {result.rows} requests ({result.content_rows} with content) -> {result.output_path}",
        f"  tokenizer {result.tokenizer_id}, prefix sharing: {result.mode}",
        f"  exact token counts: {result.texts_exact}/{result.texts} texts ({100 * result.exact_rate:.3f}%), "
        f"{result.miss_count} missed",
        f"  {result.prompt_tokens} prompt tokens in {result.elapsed_s:.2f}s ({result.cpu_s:.2f}s CPU, "
        f"{rate / 1e6:.2f}M tokens per CPU-second); "
        f"{result.messages} messages, {result.messages_generated} generated (others from the history cache)",
    ]
    if result.dropped_fields:
        dropped = ", ".join(f"{k} x{v}" for k, v in sorted(result.dropped_fields.items()))
        lines.append(f"  dropped fields (not whitelisted): {dropped}")
    if result.nonces_truncated:
        lines.append(f"  {result.nonces_truncated} prompts were shorter than the nonce (nonce truncated)")
    return "\n".join(lines)
