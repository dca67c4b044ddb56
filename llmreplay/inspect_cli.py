"""`llmreplay inspect TRACE`: the shape of a trace as a terminal table, or JSON with --json."""

from __future__ import annotations

import json

import click


@click.command("inspect")
@click.argument("trace", type=click.Path(path_type=str))
@click.option("--json", "as_json", is_flag=True, help="Print the full summary as JSON.")
def inspect_trace(trace: str, as_json: bool) -> None:
    """Show the shape of TRACE (a Parquet file or a directory of them)."""
    from llmreplay.count_units import trace_count_units
    from llmreplay.trace_io import read_trace
    from llmreplay.trace_shape import describe_trace

    loaded = read_trace(trace, columns=None)
    units = trace_count_units(loaded.table, loaded.meta.tokenizer)
    summary = {
        "trace": trace,
        "meta": _public_meta(loaded.meta),
        **describe_trace(loaded.table),
        "count_units": {**units.as_dict(), "note": units.note()},
    }
    if as_json:
        click.echo(json.dumps(summary, indent=2))
    else:
        _print_table(summary)


def _public_meta(meta) -> dict:
    return {
        "format_version": meta.format_version,
        "source": meta.source,
        "block_size": meta.block_size,
        "tokenizer": meta.tokenizer,
        "content": meta.content,
        "anonymized": meta.anonymized,
        "clock_domain": meta.clock_domain,
        "relative_time": meta.relative_time,
    }


def _fmt(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.1f}" if abs(value) >= 100 else f"{value:.3g}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def _pcts(stats: dict) -> str:
    return " / ".join(_fmt(v) for k, v in stats.items() if k.startswith("p"))


def _print_table(s: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{s['trace']}", show_header=False, title_justify="left")
    table.add_column("what", style="bold")
    table.add_column("value")
    for what, value in (*_shape_rows(s), *_session_rows(s), *_production_rows(s)):
        table.add_row(what, value)
    Console().print(table)


def _shape_rows(s: dict) -> list[tuple[str, str]]:
    """The trace's kind, size, rate, token lengths and mix of requests, endpoints and errors (a
    reasoning row from format 1.2 on; server state and errors only when the trace has some)."""
    meta = s["meta"]
    kind = "content" if meta["content"] else "shape"
    rate = s["rate_per_s"]
    share = s["share"]
    rows = [
        (
            "trace",
            f"v{meta['format_version']} {kind} trace, source {meta['source']}, block size {meta['block_size']}, "
            f"tokenizer {meta['tokenizer'] or 'unknown'}{', anonymized' if meta['anonymized'] else ''}",
        ),
        ("requests", f"{s['requests']:,} over {s['span_s']:,.1f} s"),
        (
            "request rate /s",
            f"mean {_fmt(rate['mean'])}, peak {_fmt(rate['peak_1s'])} (1 s), {_fmt(rate['peak_1min'])} (1 min)",
        ),
        ("prompt tokens p50/p90/p99", _pcts(s["prompt_tokens"])),
        ("completion tokens p50/p90/p99", _pcts(s["completion_tokens"])),
    ]
    if s["reasoning_tokens"]["p50"] is not None:  # format 1.2 on: of the completion tokens
        rows.append(("of which reasoning p50/p90/p99", _pcts(s["reasoning_tokens"])))
    rows.append(
        (
            "mix",
            f"stream {share['stream']:.1%}, tools {share['tools']:.1%}, structured output "
            f"{share['structured_output']:.1%}, errors {share['errors']:.1%}",
        )
    )
    rows.append(("endpoints", ", ".join(f"{k} {v:,}" for k, v in s["endpoints"].items())))
    if s["server_state"]:
        rows.append(("server state", ", ".join(f"{k} {v:,}" for k, v in s["server_state"].items())))
    if s["errors_by_kind"]:
        rows.append(("errors by kind", ", ".join(f"{k} {v}" for k, v in s["errors_by_kind"].items())))
    return rows


def _session_rows(s: dict) -> list[tuple[str, str]]:
    """Sessions, think time and prefix sharing (reproduced to within a block: exactly only for
    blocks of 16 tokens or fewer)."""
    sessions = s["sessions"]
    block_size = s["meta"]["block_size"]
    return [
        (
            "sessions",
            f"{sessions['count']:,} sessions holding {sessions['requests_in_sessions']:,} requests; "
            f"turns p50/p90/p99 {_pcts(sessions['turns_per_session'])}",
        ),
        ("think time ms p50/p90/p99", _pcts(sessions["think_time_ms"])),
        (
            "prefix sharing",
            f"{s['prefix_sharing_ratio']:.1%} of prompt blocks seen before; a replay reproduces it to within "
            f"{block_size:,} tokens" + ("" if block_size <= 16 else " (block-accurate only)"),
        ),
    ]


def _production_rows(s: dict) -> list[tuple[str, str]]:
    """What production's engine measured, when the trace holds it: its token count per trace token
    (or why it is not known) and its latencies."""
    rows = []
    units = s["count_units"]
    if units["rate"] is not None:
        rows.append(
            (
                "count units",
                units["note"]
                or f"production's own tokens: its engine counted {units['rate']:.3f} per trace token "
                f"({units['rows']:,} requests)",
            )
        )
    for name, stats in (s["latency_ms"] or {}).items():
        rows.append((f"production {name.upper()} ms p50/p90/p99", f"{_pcts(stats)}  (n={stats['count']:,})"))
    return rows
