"""The `llmreplay anonymize` command: parse and check flags, build an AnonymizeConfig, run, report.

Heavy imports happen inside the command so `llmreplay --help` stays fast.
"""

from __future__ import annotations

import json
from pathlib import Path

import click


@click.command()
@click.argument("in_trace", type=click.Path(path_type=Path))
@click.option(
    "-o",
    "--out",
    "out_trace",
    required=True,
    type=click.Path(path_type=Path),
    help="Anonymized trace file (.parquet).",
)
@click.option(
    "--tokenizer",
    default=None,
    help="Tokenizer for exact lengths [default: the trace's, else mistral-tekken].",
)
@click.option(
    "--key-file",
    type=click.Path(path_type=Path),
    default=None,
    help="Secret key file (mode 0600; 64+ hex digits or 32+ bytes); created if missing "
    "[default: OUT's name + .anonymization.key in the current directory].",
)
@click.option(
    "--prefix-sharing",
    type=click.Choice(["preserve", "session", "none"]),
    default=None,
    help="Keep all sharing, only within sessions, or none [default: preserve].",
)
@click.option(
    "--nonce-tokens",
    type=int,
    default=None,
    help="Tokens of nonce in session/none modes, at least 1 [default: 8].",
)
@click.option(
    "--verify", is_flag=True, help="Re-read the output and prove counts, structure, sharing and no leaks."
)
@click.option("--force", is_flag=True, help="Replace an existing output file.")
@click.option(
    "--keep-meta", multiple=True, help="Carry this TraceMeta.extra key (or 'source') over; repeatable."
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option("--quiet", is_flag=True, help="Print only problems.")
def anonymize(
    in_trace,
    out_trace,
    tokenizer,
    key_file,
    prefix_sharing,
    nonce_tokens,
    verify,
    force,
    keep_meta,
    as_json,
    quiet,
):
    """Replace all content of IN_TRACE with fake text of the same token lengths; keep its shape."""
    from anonymizer.pipeline import AnonymizeConfig, anonymize_trace

    given = {"prefix_sharing": prefix_sharing, "nonce_tokens": nonce_tokens, "tokenizer": tokenizer}
    config = AnonymizeConfig(
        input_path=in_trace,
        output_path=out_trace,
        key_file=key_file,
        force=force,
        keep_meta=tuple(keep_meta),
        **{k: v for k, v in given.items() if v is not None},
    )
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

        report = verify_anonymized(config.input_path, config.output_path, result.tokenizer_id, result.mode)
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
