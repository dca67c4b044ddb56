"""`llmreplay export mooncake`: a trace as Mooncake jsonl, as AIPerf (`--custom-dataset-type
mooncake_trace --fixed-schedule`) and SGLang's bench_serving read it, to cross-check with those tools.

Timestamps count from the trace's first request (0), whatever the source's clock. Streams the trace
in batches; the file appears only when complete (llmreplay.output_paths). Imports only the core.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import click

from llmreplay import options
from llmreplay.errors import BadInput
from llmreplay.options import as_path, force_field, option
from llmreplay.otlp.cli import OTLP_FLAGS, otlp_config
from llmreplay.otlp.config import OtlpConfig
from llmreplay.output_paths import atomic_output, check_output_file
from llmreplay.prometheus.cli import export_prometheus, push_config
from llmreplay.prometheus.config import PUSH_FLAGS, ObserveConfig
from llmreplay.trace_format import MOONCAKE_BLOCK_SIZE, MOONCAKE_EXPORT_COLUMNS

SESSION_TIMINGS = ("timestamp", "delay")
_COLUMNS = MOONCAKE_EXPORT_COLUMNS


@dataclass(frozen=True, slots=True)
class MooncakeExportConfig:
    trace_path: Path
    output_path: Path = option(
        flags=("-o", "--out"), metavar="FILE", parse=as_path, help="File to write (mooncake, csv)."
    )
    force: bool = force_field()
    block_size: int = option(
        MOONCAKE_BLOCK_SIZE,
        type=int,
        help="Tokens per written hash id, what the Mooncake tools assume unless told; a multiple of the "
        "trace's block size.",
    )
    # "timestamp": every row keeps its arrival (SGLang needs it; AIPerf sends a later turn at its
    # timestamp, not before the previous answer). "delay": later turns carry AIPerf's `delay` (think
    # time, ms after the previous answer) instead, as llmreplay replays sessions.
    session_timing: str = option(
        "timestamp",
        choices=SESSION_TIMINGS,
        help="Later turns of a session: 'timestamp' (SGLang and AIPerf) or AIPerf's 'delay' (think time "
        "after the previous answer, as llmreplay replays sessions).",
    )


@dataclass(slots=True)
class ExportSummary:
    rows_written: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


class HashIdMapper:
    """Our keyed 63-bit hashes -> small dense ints in order of first appearance (equal stays equal)."""

    def __init__(self):
        self._ids: dict[int, int] = {}

    def __call__(self, hashes: list[int]) -> list[int]:
        ids = self._ids
        return [ids.setdefault(h, len(ids)) for h in hashes]


def reblock(hashes: list[int], prompt_tokens: int, source_block: int, target_block: int) -> list[int]:
    """Hashes for `target_block`-token blocks from chained hashes of `source_block`-token blocks.

    A chained hash covers the whole prefix up to its block's end, so the hash ending at each target
    boundary is the source hash ending there (target must be a multiple of source).
    """
    if target_block == source_block or not hashes:
        return hashes
    factor = target_block // source_block
    count = -(-prompt_tokens // target_block)
    last = len(hashes) - 1
    return [hashes[min((k + 1) * factor - 1, last)] for k in range(count)]


def mooncake_rows(
    batches: Iterator, config: MooncakeExportConfig, source_block: int, origin_us: int, keep_ids: bool
) -> Iterator[dict | tuple[str, str]]:
    """Mooncake dicts, or ("skip", reason) for rows Mooncake cannot express. Pure over batches."""
    mapper = None if keep_ids else HashIdMapper()
    for batch in batches:
        for row in batch.to_pylist():
            if row["endpoint"] == "embeddings":
                yield ("skip", "embeddings request (no generation)")
                continue
            if row["completion_tokens"] is None:
                yield ("skip", "no completion_tokens recorded")
                continue
            yield _mooncake_row(row, config, source_block, origin_us, mapper)


def _mooncake_row(row: dict, config, source_block: int, origin_us: int, mapper) -> dict:
    arrival_us = row["arrival_time"]
    hashes = reblock(row["prefix_block_hashes"], row["prompt_tokens"], source_block, config.block_size)
    out: dict = {}
    delay_ms = _delay_ms(row) if config.session_timing == "delay" else None
    if delay_ms is None:
        out["timestamp"] = (arrival_us - origin_us + 500) // 1000
    out["input_length"] = row["prompt_tokens"]
    out["output_length"] = row["completion_tokens"]
    out["hash_ids"] = hashes if mapper is None else mapper(hashes)
    if row["session_id"] is not None:
        out["session_id"] = row["session_id"]
        if delay_ms is not None:
            out["delay"] = delay_ms
    return out


def _delay_ms(row: dict) -> int | float | None:
    if row["session_id"] is None or row["turn_index"] == 0 or row["think_time_ns"] is None:
        return None
    think_ns = row["think_time_ns"]
    return think_ns // 1_000_000 if think_ns % 1_000_000 == 0 else round(think_ns / 1_000_000, 3)


def check_block_sizes(trace_block: int, config: MooncakeExportConfig, block_size_given: bool) -> list[str]:
    """Refuse what cannot be expressed exactly; warnings for what the target tools must be told."""
    target = config.block_size
    if target <= 0:
        raise BadInput(f"--block-size {target}: must be a positive number of tokens")
    if target % trace_block:
        hint = (
            ""
            if block_size_given
            else f"; pass --block-size {trace_block} and tell AIPerf --isl-block-size {trace_block}"
        )
        raise BadInput(
            f"{config.trace_path}: the trace hashes {trace_block}-token blocks, which cannot make "
            f"{target}-token hash_ids (a block size must be a multiple of the trace's){hint}"
        )
    if target != MOONCAKE_BLOCK_SIZE:
        return [
            f"hash_ids stand for {target}-token blocks; SGLang bench_serving assumes 512 and AIPerf needs "
            f"--isl-block-size {target}"
        ]
    return []


def export_mooncake(config: MooncakeExportConfig, block_size_given: bool = False) -> ExportSummary:
    import orjson

    from llmreplay.importers.source_request import HASH_ID_ORIGIN_KEY, SOURCE_IDS
    from llmreplay.trace_io import iter_trace_batches

    if config.session_timing not in SESSION_TIMINGS:
        raise BadInput(f"--session-timing {config.session_timing}: one of {', '.join(SESSION_TIMINGS)}")
    check_output_file(config.output_path, config.force, "-o")
    meta, batches = iter_trace_batches(config.trace_path, columns=_COLUMNS)
    summary = ExportSummary(warnings=check_block_sizes(meta.block_size, config, block_size_given))
    keep_ids = meta.extra.get(HASH_ID_ORIGIN_KEY) == SOURCE_IDS
    batches = _cast_arrival(batches)
    first = next(batches, None)
    if first is None:
        raise BadInput(f"{config.trace_path}: the trace has no rows")
    origin_us = first.column("arrival_time")[0].as_py()  # timestamps from 0, whatever the source's clock
    rows = mooncake_rows(_chain(first, batches), config, meta.block_size, origin_us, keep_ids)
    with atomic_output(config.output_path, config.force, "-o") as tmp, open(tmp, "wb") as handle:
        for row in rows:
            if isinstance(row, tuple):
                summary.skipped[row[1]] = summary.skipped.get(row[1], 0) + 1
                continue
            handle.write(orjson.dumps(row))
            handle.write(b"\n")
            summary.rows_written += 1
        if not summary.rows_written:
            raise BadInput(f"{config.trace_path}: no row can be written as Mooncake ({summary.skipped})")
    return summary


def _cast_arrival(batches):
    """arrival_time as integer microseconds since the epoch."""
    import pyarrow as pa

    for batch in batches:
        if batch.num_rows == 0:
            continue
        index = batch.schema.get_field_index("arrival_time")
        arrival = batch.column(index).cast(pa.int64())
        yield batch.set_column(index, "arrival_time", arrival)


def _chain(first, rest):
    yield first
    yield from rest


EXPORT_TARGETS = ("mooncake", "csv", "otlp", "prometheus")
MOONCAKE_ONLY = ("block_size", "session_timing")


@click.command("export")
@click.argument("target", type=click.Choice(EXPORT_TARGETS))
@click.argument("trace", type=click.Path(path_type=Path))
@options.click_options(MooncakeExportConfig)
@options.click_options(OtlpConfig)
@options.click_options(ObserveConfig, only=PUSH_FLAGS)
@click.pass_context
def export_trace(ctx: click.Context, target: str, trace: Path, **values):
    """Write TRACE as Mooncake jsonl (timestamps in ms from its first request) for AIPerf or SGLang;
    or (csv) a replay run as one CSV row per request, or a `compare --json` result as its gate's cases.

    \b
    AIPerf:
      aiperf profile --model MODEL --url URL --endpoint-type chat --streaming
        --input-file OUT --custom-dataset-type mooncake_trace --fixed-schedule
        --extra-inputs ignore_eos:true --tokenizer TOKENIZER
        (add --isl-block-size N when --block-size N is not 512)
    SGLang:
      python -m sglang.bench_serving --backend sglang --model MODEL --dataset-name mooncake
        --dataset-path OUT --mooncake-workload conversation --use-trace-timestamps true
    CSV (docs/compare-format.md#csv):
      llmreplay export csv runs/candidate -o requests.csv     # a run: one row per request, ms columns
      llmreplay export csv compare.json -o gate.csv           # compare --json: one row per gate case
    OTLP/HTTP (docs/observability.md#opentelemetry):
      llmreplay export otlp runs/candidate --otlp-endpoint http://localhost:4318
    Prometheus (docs/observability.md#after-the-run---pushgateway-and---remote-write):
      llmreplay export prometheus runs/candidate --pushgateway http://localhost:9091
      llmreplay export prometheus runs/candidate --remote-write http://localhost:9090/api/v1/write
    """
    otlp = otlp_config(values)
    push = push_config(values)
    if target == "prometheus":
        _refuse_flags(ctx, ("output_path", "force", *MOONCAKE_ONLY), MooncakeExportConfig, "mooncake and csv")
        _refuse_flags(ctx, OTLP_FLAGS, OtlpConfig, "otlp")
        export_prometheus(trace, push)
        return
    _refuse_flags(ctx, PUSH_FLAGS, ObserveConfig, "prometheus")
    if target == "otlp":
        _refuse_flags(ctx, ("output_path", "force", *MOONCAKE_ONLY), MooncakeExportConfig, "mooncake and csv")
        from llmreplay.otlp.cli import export_otlp

        export_otlp(trace, otlp)
        return
    _refuse_flags(ctx, OTLP_FLAGS, OtlpConfig, "otlp")
    if values["output_path"] is None:
        raise BadInput(f"export {target}: -o/--out FILE is required")
    if target == "csv":
        _export_csv(ctx, trace, values)
        return
    config = options.build(MooncakeExportConfig, values, trace_path=trace)
    summary = export_mooncake(config, block_size_given=values["block_size"] is not None)
    for warning in summary.warnings:
        click.echo(f"llmreplay export: warning: {warning}", err=True)
    if summary.skipped:
        reasons = "; ".join(f"{count} {reason}" for reason, count in summary.skipped.items())
        click.echo(f"llmreplay export: skipped {sum(summary.skipped.values())} rows: {reasons}", err=True)
    click.echo(f"wrote {summary.rows_written} rows to {config.output_path}")


def _export_csv(ctx: click.Context, source: Path, values: dict) -> None:
    """A run (directory or results.parquet) as per-request CSV; a compare result (.json) as its gate cases."""
    _refuse_flags(ctx, MOONCAKE_ONLY, MooncakeExportConfig, "mooncake")
    out = as_path(values["output_path"], "-o")
    force = bool(values.get("force"))
    if source.is_file() and source.suffix == ".json":
        from llmreplay.compare_format import gate_cases, read_compare_result
        from llmreplay.compare_outputs import verdict_csv
        from llmreplay.output_paths import write_atomic

        check_output_file(out, force, "-o")
        result = read_compare_result(source)
        write_atomic(out, verdict_csv(result), force, "-o")
        click.echo(f"wrote {len(gate_cases(result))} gate cases to {out}")
        return
    from llmreplay.run_csv import write_requests_csv

    rows = write_requests_csv(source, out, force, "-o")
    click.echo(f"wrote {rows} requests to {out}")


def _refuse_flags(ctx: click.Context, names, cls, targets: str) -> None:
    """BadInput for the first flag of `names` given on the command line: it applies to `targets` only."""
    for name in names:
        if ctx.get_parameter_source(name) not in (None, click.core.ParameterSource.DEFAULT):
            raise BadInput(f"{options.flag_of(cls, name)}: applies to 'export {targets}' only")
