"""The terminal report of a comparison (or of one run): verdicts first, then the numbers, with rich.

Renders the dict built by replayer.compare.sides; computes nothing of its own.
"""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from llmreplay.metrics import BY_NAME, LATENCY_METRICS, PERCENTILES

VERDICT_STYLES = {
    "pass": "green",
    "no_change": "green",
    "improvement": "bold green",
    "regression": "bold red",
    "breach": "bold red",
    "unfaithful": "bold red",
    "inconclusive": "yellow",
    "different_load": "yellow",
    "no_data": "dim",
}
VERDICT_WORDS = {"no_change": "no change", "different_load": "not compared", "no_data": "no data"}
STATUS_STYLES = {"ok": "green", "warn": "yellow", "fail": "bold red", "info": "dim"}


def render_terminal(result: dict, console: Console) -> None:
    _headline(result, console)
    if result["mode"] == "compare":
        _latency_comparison(result, console)
    else:
        _latency_single(result, console)
    _server_metrics(result, console)
    _cold_start(result, console)
    _drift(result, console)
    _slos_and_goodput(result, console)
    _errors(result, console)
    _cache(result, console)
    _fidelity(result, console)
    _footer(result, console)


def _styled(verdict: str) -> str:
    style = VERDICT_STYLES.get(verdict, "")
    word = VERDICT_WORDS.get(verdict, verdict)
    return f"[{style}]{word}[/]" if style else word


def _ms(value) -> str:
    if value is None:
        return "-"
    return f"{value:,.0f}" if value >= 100 else f"{value:.1f}" if value >= 1 else f"{value:.2f}"


def _headline(result: dict, console: Console) -> None:
    """The verdict in one line first; then what was compared and any sample-size warning."""
    verdict = result["verdict"]
    style = "bold green" if verdict["status"] == "pass" else "bold red"
    word, _, rest = verdict["headline"].partition(": ")
    console.print(f"[{style}]{word}[/]: {escape(rest)}", soft_wrap=True)
    sides = result["sides"]
    names = " vs ".join(f"{label} {side['path']} ({side['kind']})" for label, side in sides.items())
    console.print(f"[dim]llmreplay {result['mode']}: {escape(names)}[/]", soft_wrap=True)
    for warning in result.get("warnings") or ():
        console.print(f"[yellow]warning:[/] {escape(warning)}", soft_wrap=True)


def _latency_comparison(result: dict, console: Console) -> None:
    tolerance = result["tolerance"]
    level = f"{result['interval_confidence']:.2%}"
    table = Table(
        title=f"Latency, baseline -> candidate (ms; ratio [{level} paired-bootstrap CI]; tolerance ±{tolerance:.0%})"
    )
    table.add_column("metric")
    for q in PERCENTILES:
        table.add_column(f"p{q}")
    for metric in LATENCY_METRICS:
        row = result["latency"][metric]
        judged = "" if BY_NAME[metric].gates else " [dim](not judged)[/]"
        cells = [f"{metric} (n {row['baseline']['count']:,}/{row['candidate']['count']:,}){judged}"]
        for q in PERCENTILES:
            cmp_row = row["comparison"].get(f"p{q}")
            if cmp_row is None:
                cells.append("–")
                continue
            b, c = row["baseline"][f"p{q}_ms"], row["candidate"][f"p{q}_ms"]
            ratio = "" if cmp_row["ratio"] is None else f"{cmp_row['ratio']:.2f}x"
            ci = "" if cmp_row["ci_low"] is None else f" [{cmp_row['ci_low']:.2f}-{cmp_row['ci_high']:.2f}]"
            few = " [dim](few)[/]" if cmp_row.get("few_samples") else ""
            cells.append(f"{_ms(b)} -> {_ms(c)}\n{ratio}{ci}\n{_styled(cmp_row['verdict'])}{few}")
        table.add_row(*cells)
    console.print(table)
    paired = result.get("paired") or {}
    if paired.get("pairs"):
        lines = []
        for metric, row in paired["metrics"].items():
            if row.get("count"):
                lines.append(
                    f"{metric}: ratio p10 {row['p10']:.2f} p50 {row['p50']:.2f} p90 {row['p90']:.2f} "
                    f"p99 {row['p99']:.2f}; slower {row['share_slower']:.0%}, faster {row['share_faster']:.0%}"
                )
        console.print(
            f"[bold]Paired per request[/] ({paired['pairs']:,} pairs, candidate/baseline): "
            + "; ".join(lines)
        )


def _latency_single(result: dict, console: Console) -> None:
    (label,) = result["sides"]
    table = Table(title="Latency (ms)")
    for column in ("metric", "count", *(f"p{q}" for q in PERCENTILES)):
        table.add_column(column)
    for metric in LATENCY_METRICS:
        row = result["latency"][metric][label]
        table.add_row(metric, f"{row['count']:,}", *(_ms(row.get(f"p{q}_ms")) for q in PERCENTILES))
    console.print(table)


def _server_metrics(result: dict, console: Console) -> None:
    """One line per run and quantity the engine exposed: its peak (when, in trace seconds) and mean."""
    for label, view in (result.get("server_metrics") or {}).items():
        if not view:
            continue
        console.print(f"[bold]Server metrics[/] of {escape(label)} ({escape(view['engine'])}'s /metrics):")
        for shown in view["series"].values():
            peak, mean = _metric(shown["peak"], shown["share"]), _metric(shown["mean"], shown["share"])
            when = (
                f"peak {peak} at {shown['peak_at_s']:,.1f} s, mean {mean}"
                if shown["peak"]
                else "0 throughout"
            )
            console.print(f"  {escape(shown['title'])}: {when}", soft_wrap=True)


def _metric(value: float, share: bool) -> str:
    return f"{value:.1%}" if share else f"{value:,.4g}"


def _slos_and_goodput(result: dict, console: Console) -> None:
    if not result["slos"]:
        return
    table = Table(title="SLOs (percentile thresholds) and goodput (requests meeting every per-request SLO)")
    labels = list(result["sides"])
    b_label = "baseline" if len(labels) == 2 else None
    for column in ("SLO", "baseline", labels[-1], "verdict"):
        table.add_column(column)
    for slo in result["slos"]:
        table.add_row(slo["slo"], _ms(slo["baseline_ms"]), _ms(slo["candidate_ms"]), _styled(slo["verdict"]))
    goodput = result["goodput"]
    b_text = _goodput_text(goodput.get(b_label)) if b_label else ""
    table.add_row("goodput", b_text, _goodput_text(goodput.get(labels[-1])), "")
    console.print(table)


def _goodput_text(good: dict | None) -> str:
    if not good or good["share"] is None:
        return "-"
    rate = "" if good["rate_per_s"] is None else f", {good['rate_per_s']:.2f} req/s"
    return f"{good['share']:.1%}{rate}"


def _errors(result: dict, console: Console) -> None:
    errors = result["errors"]
    parts = []
    for label in result["sides"]:
        side = errors.get(label)
        if side is None:
            continue
        rate = "-" if side["error_rate"] is None else f"{side['error_rate']:.2%}"
        kinds = ", ".join(f"{k} {v}" for k, v in side["by_kind"].items()) or "none"
        parts.append(f"{label}: error rate {rate} ({kinds})")
    comparison = errors.get("comparison")
    suffix = f" -> {_styled(comparison['verdict'])}" if comparison else ""
    console.print("[bold]Errors[/] " + escape("; ".join(parts)) + suffix)
    for label in result["sides"]:
        for message in (errors.get(label) or {}).get("top_messages", ()):
            status = "" if message["status"] is None else f" {message['status']}"
            text = message["message"] or "(no message)"
            console.print(
                f"  {escape(label)}: {message['count']:,} x {escape(message['kind'] or '')}{status}: {escape(text)}",
                soft_wrap=True,
            )


def _cache(result: dict, console: Console) -> None:
    for line in cache_lines(result):
        console.print(f"[bold]Prefix cache[/]: {escape(line)}", soft_wrap=True)


def cache_lines(result: dict) -> list[str]:
    """The cached-token share side by side and the per-request cached tokens of a comparison, as
    plain lines (the HTML report shows the same); none for one run or when no side reports any."""
    cache = result.get("cache")
    if not cache:
        return []
    shares = [cache[s]["cached_share"] for s in ("baseline", "candidate")]
    if shares == [None, None]:
        return []
    text = ["n/a" if s is None else f"{s:.1%}" for s in shares]
    line = f"cached-token share baseline {text[0]} -> candidate {text[1]}"
    if cache["difference"] is not None:
        line += f" ({cache['difference'] * 100:+.1f} points; limit ±{cache['limit'] * 100:g})"
    writes = [cache[s]["write_share"] for s in ("baseline", "candidate")]
    if writes != [None, None]:
        w = ["n/a" if s is None else f"{s:.1%}" for s in writes]
        line += f"; cache writes baseline {w[0]} -> candidate {w[1]}"
    lines = [line]
    pairs = (result.get("paired") or {}).get("cached_tokens") or {}
    if pairs.get("count"):
        lines.append(
            f"cached tokens per request ({pairs['count']:,} pairs): {pairs['share_differ']:.1%} differ by more "
            f"than one block ({pairs['block_tokens']} tokens), {pairs['share_fewer']:.1%} fewer on the "
            f"candidate; |difference| p50 {pairs['abs_difference_p50']:,.0f}, "
            f"p90 {pairs['abs_difference_p90']:,.0f} tokens"
        )
    return lines


def _fidelity(result: dict, console: Console) -> None:
    checks = result["fidelity"]["checks"]
    notable = [c for c in checks if c["status"] in ("warn", "fail")]
    if not checks:
        return
    if not notable:
        console.print(f"[bold]Fidelity[/]: all {len(checks)} checks ok")
        return
    for check in notable:
        style = STATUS_STYLES[check["status"]]
        console.print(
            f"[bold]Fidelity[/] [{style}]{check['status']}[/] {escape(check['check'])}: {escape(check['detail'])}",
            soft_wrap=True,
        )


def _footer(result: dict, console: Console) -> None:
    domains = result["clock_domains"]
    for label in result["sides"]:
        console.print(f"[dim]{label}: {domains.get(label, '')}[/]")
    if domains.get("note"):
        console.print(f"[dim]note: {domains['note']}[/]")


DRIFT_PERCENTILES = ("p50", "p95", "p99")  # replayer.compare.drift's
DRIFT_STYLES = {
    "drifted_up": "bold red",
    "stable": "green",
    "improved": "bold green",
    "inconclusive": "yellow",
}


def _cold_start(result: dict, console: Console) -> None:
    """Each run's cold start beside the rest (replayer.measured.cold_start), and its tail note."""
    for label, section in (result.get("cold_start") or {}).items():
        if not section["requests"]:
            continue
        where = "the warm-up, in no verdict" if section["source"] == "warmup" else "the first requests"
        parts = []
        for name, view in section["metrics"].items():
            cold, rest = view["cold"], view["rest"]
            parts.append(f"{name.upper()} p50 {_ms(cold.get('p50_ms'))} vs {_ms(rest.get('p50_ms'))} ms")
        console.print(
            f"Cold start ({escape(label)}: {where}, {section['requests']} of {section['of']} requests): "
            + "; ".join(parts),
            soft_wrap=True,
        )
        if section["note"]:
            console.print(f"[yellow]note:[/] {escape(section['note'])}", soft_wrap=True)


def _drift(result: dict, console: Console) -> None:
    """A soak's last loop against its first (replayer.compare.drift): cells, trends, findings."""
    for label, drift in (result.get("drift") or {}).items():
        table = Table(
            title=f"Drift of {label}: loop {drift['last_loop']} vs loop {drift['first_loop']} "
            f"({drift['common_requests']['common']} requests paired; tolerance ±{drift['tolerance']:.0%})"
        )
        table.add_column("metric")
        for q in DRIFT_PERCENTILES:
            table.add_column(q)
        for name, cells in drift_rows(drift):
            shown = []
            for cell in cells:
                if cell is None:
                    shown.append("-")
                    continue
                numbers, word = cell
                style = DRIFT_STYLES.get(word.replace(" ", "_"), "")
                shown.append(f"{numbers} [{style}]{word}[/]" if style else f"{numbers} {word}")
            table.add_row(name, *shown)
        console.print(table)
        rate = drift["cells"].get("error_rate")
        if rate is not None and rate["first"] is not None:
            console.print(
                f"error rate {rate['first']:.1%} -> {rate['last']:.1%}: {rate['verdict'].replace('_', ' ')}"
            )
        for role, fitted in drift["trends"].items():
            console.print(
                f"trend {role}: {fitted['first']:.4g} -> {fitted['last']:.4g}, slope {fitted['slope_per_hour']:.4g}/h"
                f" (r2 {fitted['r2']:.2f}){' [bold red]rising[/]' if fitted['rising'] else ''}"
            )
        console.print(f"drift: {escape(drift['headline'])}", soft_wrap=True)
        for line in drift["findings"]:
            console.print(f"[bold red]finding:[/] {escape(line)}", soft_wrap=True)


def drift_rows(drift: dict) -> list[tuple[str, list[tuple[str, str] | None]]]:
    """Each latency metric of a drift section with (ratio and CI, verdict words) per percentile; None: no data."""
    rows = []
    for name, by_q in drift["cells"].items():
        if name == "error_rate":
            continue
        cells: list[tuple[str, str] | None] = []
        for q in DRIFT_PERCENTILES:
            cell = by_q.get(q)
            if cell is None or cell["ratio"] is None:
                cells.append(None)
                continue
            ci = f" [{cell['ci_low']:.2f}, {cell['ci_high']:.2f}]" if cell["ci_low"] is not None else ""
            cells.append((f"x{cell['ratio']:.2f}{ci}", cell["verdict"].replace("_", " ")))
        rows.append((name.upper(), cells))
    return rows
