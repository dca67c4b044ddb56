"""The HTML report: one self-contained file (inline CSS and SVG, no script, no network) from a result dict.

Sections in the order a reviewer needs them: verdict, fidelity, latency, charts, buckets,
errors, goodput, then the configurations of both sides and the definitions used.
"""

from __future__ import annotations

import datetime
import json
import os
import re
from html import escape
from pathlib import Path

from llmreplay.metrics import BY_NAME, GATING, LATENCY_METRICS, PERCENTILES
from replayer.report.svg import Chart, Series, render_chart
from replayer.report.terminal import cache_lines, drift_rows

COLORS = {"baseline": "#3b6ea8", "candidate": "#d9622b", "run": "#d9622b"}
# Paired-ratio curves, in the order of the per-request metrics of llmreplay.metrics.METRICS.
PAIRED_COLORS = ("#d9622b", "#3b6ea8", "#6a3d9a", "#2a9d8f", "#8a6d1f")
# Defence in depth: a run.json should hold no secret, but a report must never show one.
SECRET_KEY = re.compile(
    r"(api[_-]?key|authorization|secret|password|bearer|cookie|anonymi[sz]ation[_-]?key)", re.I
)

CSS = """
body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',sans-serif;margin:0;color:#1d2330;background:#f6f7f9}
main{max-width:1340px;margin:0 auto;padding:24px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #d8dce3;padding-bottom:4px}
h3{font-size:15px;margin:16px 0 6px}
.banner{padding:14px 18px;border-radius:8px;margin:16px 0;font-size:16px}
.banner.pass{background:#e5f5ea;border:1px solid #7cc49a}.banner.fail{background:#fdeaea;border:1px solid #e08d8d}
.banner ul{margin:6px 0 0 18px;padding:0;font-size:14px}
table{border-collapse:collapse;background:#fff;margin:6px 0 10px;font-size:13px}
th,td{border:1px solid #dde1e7;padding:4px 8px;text-align:right;vertical-align:top}
th{background:#eef1f5;font-weight:600}td.l,th.l{text-align:left}
.v-pass,.v-no_change,.s-ok{color:#17803d}.v-improvement{color:#0b6b2f;font-weight:600}
.v-regression,.v-breach,.v-unfaithful,.s-fail{color:#b42318;font-weight:600}
.v-inconclusive,.v-different_load,.s-warn{color:#a15c00}.v-no_data,.s-info,.muted{color:#6b7280}
.headline{font-size:18px;font-weight:600}.warn{color:#a15c00}
.charts{display:flex;flex-wrap:wrap;gap:12px}
figure.chart{margin:0;background:#fff;border:1px solid #dde1e7;border-radius:6px;padding:6px}
figcaption{font-weight:600;font-size:13px;margin:2px 4px}
svg text{font-size:11px;fill:#374151}svg text.label{font-size:12px;fill:#111827}
svg .grid{stroke:#eceef2}svg .axis{stroke:#9ca3af}svg .ref{stroke:#6b7280;stroke-dasharray:3 3}
pre{background:#fff;border:1px solid #dde1e7;padding:8px;overflow:auto;max-height:360px;font-size:12px}
.cols{display:flex;gap:16px;flex-wrap:wrap}.cols>div{flex:1;min-width:420px}
dl{display:grid;grid-template-columns:max-content 1fr;gap:2px 12px}dt{font-weight:600}dd{margin:0}
"""


def write_html(result: dict, path: str | os.PathLike) -> Path:
    """Render and write atomically (temporary name, rename): no half-written report."""
    from llmreplay.output_paths import write_atomic

    return write_atomic(path, render_html(result), force=True, flag="--html")


def render_html(result: dict) -> str:
    labels = list(result["sides"])
    title = "llmreplay comparison" if result["mode"] == "compare" else "llmreplay run report"
    sections = [
        _headline(result),
        _header(result, title),
        _verdict_section(result),
        _fidelity_section(result),
        _latency_section(result, labels),
        _cdf_section(result, labels),
        _paired_section(result),
        _cache_section(result),
        _load_section(result, labels),
        _server_metrics_section(result, labels),
        _cold_start_section(result),
        _drift_section(result),
        _bucket_section(result),
        _errors_section(result, labels),
        _slo_section(result),
        _config_section(result),
        _definitions_section(result),
    ]
    body = "".join(s for s in sections if s)
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        f"<meta name='viewport' content='width=device-width'><title>{escape(title)}</title>"
        f"<style>{CSS}</style></head><body><main>{body}</main></body></html>"
    )


def _ms(value) -> str:
    if value is None:
        return "–"
    return f"{value:,.0f}" if value >= 100 else f"{value:.1f}" if value >= 1 else f"{value:.2f}"


VERDICT_WORDS = {"no_change": "no change", "different_load": "not compared", "no_data": "no data"}


def _verdict(verdict: str) -> str:
    return f"<span class='v-{escape(verdict)}'>{escape(VERDICT_WORDS.get(verdict, verdict))}</span>"


def _headline(result: dict) -> str:
    """The verdict in one line, before anything else."""
    verdict = result["verdict"]
    word, _, rest = verdict["headline"].partition(": ")
    return (
        f"<div class='banner {escape(verdict['status'])} headline'><b>{escape(word)}</b>: {escape(rest)}"
        f" <span class='muted'>(exit status {verdict['exit_code']})</span></div>"
    )


def _table(headers: list[str], rows: list[list[str]], left_columns: int = 1, left_last: bool = False) -> str:
    """Numbers right-aligned; the first `left_columns` (and a trailing free-text column) left-aligned."""

    def align(i: int) -> str:
        return "l" if i < left_columns or (left_last and i == len(headers) - 1) else ""

    head = "".join(f"<th class='{align(i)}'>{h}</th>" for i, h in enumerate(headers))
    body = "".join(
        "<tr>" + "".join(f"<td class='{align(i)}'>{c}</td>" for i, c in enumerate(row)) + "</tr>"
        for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _header(result: dict, title: str) -> str:
    generated = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    rows = []
    for label, side in result["sides"].items():
        rate = "–" if side["requests_per_s"] is None else f"{side['requests_per_s']:.2f}"
        tokens = "–" if side["output_tokens_per_s"] is None else f"{side['output_tokens_per_s']:,.0f}"
        rows.append(
            [
                escape(label),
                escape(side["kind"]),
                escape(side["path"]),
                f"{side['sent']:,} / {side.get('planned', side['requests']):,}",
                f"{side['successful']:,}",
                f"{side['duration_s']:.1f}",
                f"{side['time_scale']:g}x",
                rate,
                tokens,
            ]
        )
    headers = [
        "side",
        "kind",
        "path",
        "sent / planned",
        "successful",
        "duration s",
        "speed",
        "req/s",
        "output tok/s",
    ]
    common = result.get("common_requests")
    note = ""
    if common:
        note = (
            f"<p class='muted'>Compared on the {common['common']:,} request ids present on both sides "
            f"(baseline only: {common['baseline_only']:,}, candidate only: {common['candidate_only']:,}).</p>"
        )
    return (
        f"<h1>{escape(title)}</h1><p class='muted'>generated {generated}</p>"
        + _table(headers, rows, left_columns=3)
        + note
    )


def _verdict_section(result: dict) -> str:
    verdict = result["verdict"]
    reasons = ""
    if verdict["reasons"]:
        items = "".join(f"<li>{escape(r)}</li>" for r in verdict["reasons"])
        reasons = f"<div class='banner fail'><b>Why the gate failed</b><ul>{items}</ul></div>"
    warnings = "".join(f"<p class='warn'>warning: {escape(w)}</p>" for w in result.get("warnings") or ())
    rows = [
        [escape(r["item"]), escape(r["kind"]), _verdict(r["verdict"]), escape(r["detail"])]
        for r in verdict["rows"]
        if r["kind"] != "latency"
    ]
    table = (
        _table(["item", "kind", "verdict", "detail"], rows, left_columns=2, left_last=True) if rows else ""
    )
    if result["mode"] == "compare":
        table += _latency_verdict_matrix(result)
    rule = ""
    if result["mode"] == "compare":
        rule = (
            f"<p class='muted'>Latency verdict per percentile, from a paired bootstrap (the same request pairs "
            f"resampled on both sides): <b>regression</b> when the {result['interval_confidence']:.2%} CI "
            f"({result['confidence']:.0%} family-wise over the 16 metric-percentile verdicts, Bonferroni) of "
            f"candidate/baseline lies above 1 and the ratio exceeds 1 + {result['tolerance']:.0%}; "
            "<b>improvement</b> mirrored; <b>no change</b> when the whole CI stays within the tolerance; otherwise "
            "<b>inconclusive</b> (more data needed; fails only with --fail-on-inconclusive). The gate also fails "
            f"on an SLO breach, an error rate above {result['max_error_rate']:.0%} or significantly up, an "
            "unfaithful or interrupted replay, and sides run at different speed or scale.</p>"
        )
    return f"<h2>Verdict</h2>{reasons}{warnings}{rule}{table}"


def _latency_verdict_matrix(result: dict) -> str:
    rows = []
    for metric in (m.name for m in GATING):
        cells = [BY_NAME[metric].title]
        for q in PERCENTILES:
            cmp_row = result["latency"][metric]["comparison"].get(f"p{q}")
            if cmp_row is None:
                cells.append("–")
                continue
            ratio = "" if cmp_row["ratio"] is None else f"{cmp_row['ratio']:.2f}x "
            cells.append(ratio + _verdict(cmp_row["verdict"]))
        rows.append(cells)
    return _table(["latency", *(f"p{q}" for q in PERCENTILES)], rows)


def _title(metric: str) -> str:
    """The metric's title, marked when it is shown but never judged (llmreplay.metrics)."""
    row = BY_NAME[metric]
    return row.title if row.gates else f"{row.title} <span class='muted'>(not judged)</span>"


def _fidelity_section(result: dict) -> str:
    checks = result["fidelity"]["checks"]
    if not checks:
        return ""
    rows = []
    for c in checks:
        value = "–" if c["value"] is None else f"{c['value']:.4g}"
        limit = "–" if c["limit"] is None else f"{c['limit']:g}"
        status = f"<span class='s-{escape(c['status'])}'>{escape(c['status'])}</span>"
        rows.append([escape(c["check"]), status, value, limit, escape(c["detail"])])
    flag = ""
    if result["fidelity"]["unfaithful"]:
        flag = (
            "<p class='v-unfaithful'>The replay was not faithful: latency verdicts below prove nothing.</p>"
        )
    intro = (
        "<p class='muted'>Checked before any latency verdict: was the replay the same load as production?</p>"
    )
    return (
        "<h2>Fidelity of the replay</h2>"
        + intro
        + flag
        + _table(["check", "status", "value", "limit", "detail"], rows, left_last=True)
    )


def _latency_section(result: dict, labels: list[str]) -> str:
    latency = result["latency"]
    if result["mode"] == "compare":
        level = f"{result['interval_confidence']:.2%} CI"
        headers = ["metric", "percentile", "baseline ms", "candidate ms", "ratio", level, "verdict"]
        rows = []
        for metric in LATENCY_METRICS:
            row = latency[metric]
            for q in BY_NAME[metric].percentiles:
                cmp_row = row["comparison"][f"p{q}"]
                ratio = "–" if cmp_row["ratio"] is None else f"{cmp_row['ratio']:.3f}x"
                ci = (
                    "–"
                    if cmp_row["ci_low"] is None
                    else f"{cmp_row['ci_low']:.3f} – {cmp_row['ci_high']:.3f}"
                )
                rows.append(
                    [
                        f"{_title(metric)} <span class='muted'>(n {row['baseline']['count']:,} / "
                        f"{row['candidate']['count']:,})</span>",
                        f"p{q}",
                        _ms(row["baseline"][f"p{q}_ms"]),
                        _ms(row["candidate"][f"p{q}_ms"]),
                        ratio,
                        ci,
                        _verdict(cmp_row["verdict"]),
                    ]
                )
        return "<h2>Latency percentiles</h2>" + _table(headers, rows, left_columns=2)
    headers = ["metric", "count", *(f"p{q} ms" for q in PERCENTILES)]
    rows = []
    for metric in LATENCY_METRICS:
        d = latency[metric][labels[-1]]
        rows.append([_title(metric), f"{d['count']:,}", *(_ms(d.get(f"p{q}_ms")) for q in PERCENTILES)])
    return "<h2>Latency percentiles</h2>" + _table(headers, rows)


def _cdf_section(result: dict, labels: list[str]) -> str:
    charts = []
    for metric in LATENCY_METRICS:
        series = []
        for label in labels:
            values = result["cdf"][label][metric]
            if values:
                levels = [i / (len(values) - 1) for i in range(len(values))]
                series.append(Series(label, COLORS.get(label, "#555"), tuple(values), tuple(levels)))
        charts.append(
            render_chart(
                Chart(
                    f"{BY_NAME[metric].title} CDF",
                    f"{BY_NAME[metric].title} ({BY_NAME[metric].unit}, log scale)",
                    "share of requests",
                    tuple(series),
                    log_x=True,
                    y_max=1.0,
                )
            )
        )
    return "<h2>Latency distributions</h2><div class='charts'>" + "".join(charts) + "</div>"


def _paired_section(result: dict) -> str:
    paired = result.get("paired")
    if not paired or not paired["pairs"]:
        return ""
    tolerance = result["tolerance"]
    rows, series = [], []
    colors = dict(zip(paired["metrics"], PAIRED_COLORS * 2, strict=False))
    for metric, row in paired["metrics"].items():
        if not row.get("count"):
            continue
        rows.append(
            [
                BY_NAME[metric].title,
                f"{row['count']:,}",
                *(f"{row[f'p{q}']:.2f}" for q in (1, 10, 50, 90, 99)),
                f"{row['share_slower']:.1%}",
                f"{row['share_faster']:.1%}",
            ]
        )
        quantiles = row["quantiles"]
        levels = tuple(i / (len(quantiles) - 1) for i in range(len(quantiles)))
        series.append(Series(BY_NAME[metric].title, colors[metric], tuple(quantiles), levels))
    chart = render_chart(
        Chart(
            "Per-request ratio candidate / baseline (CDF)",
            "ratio (log scale)",
            "share of requests",
            tuple(series),
            log_x=True,
            y_max=1.0,
            vertical_lines=(1 - tolerance, 1.0, 1 + tolerance),
        )
    )
    headers = [
        "metric",
        "pairs",
        "p1",
        "p10",
        "p50",
        "p90",
        "p99",
        f"slower >{tolerance:.0%}",
        f"faster >{tolerance:.0%}",
    ]
    intro = (
        f"<p class='muted'>{paired['pairs']:,} requests joined on request id. A distribution shifted as a whole "
        "means every request got slower; a long right tail with p50 near 1 means only some did.</p>"
    )
    return (
        "<h2>Paired view</h2>"
        + intro
        + "<div class='cols'><div>"
        + _table(headers, rows)
        + f"</div><div>{chart}</div></div>"
    )


def _cache_section(result: dict) -> str:
    lines = cache_lines(result)
    if not lines:
        return ""
    return "<h2>Prefix cache</h2>" + "".join(f"<p>{escape(line)}</p>" for line in lines)


def _load_section(result: dict, labels: list[str]) -> str:
    load = result["load"]
    width = load["window_trace_s"]
    specs = (
        ("TTFT over time (p50 solid, p99 dashed)", "ms", ("ttft_p50_ms", "ttft_p99_ms")),
        ("Requests per second (own clock)", "req/s", ("requests_per_s",)),
        ("Output tokens per second (own clock)", "tokens/s", ("output_tokens_per_s",)),
        ("In-flight requests (window mean)", "requests", ("inflight_mean",)),
        ("Error rate", "share of requests", ("error_rate",)),
    )
    charts = [_load_chart(load, labels, title, unit, keys) for title, unit, keys in specs]
    intro = (
        f"<p class='muted'>Windows of {width:g} s of trace time; both sides aligned on the trace's clock (a side's own "
        "time multiplied by its replay speed). Rates are per second of the side's own clock.</p>"
    )
    return "<h2>Load and latency over time</h2>" + intro + "<div class='charts'>" + "".join(charts) + "</div>"


def _load_chart(load: dict, labels: list[str], title: str, unit: str, keys: tuple[str, ...]) -> str:
    """One load-over-time chart: a line per side and key (the second key dashed), on the trace's clock."""
    xs = tuple((i + 0.5) * load["window_trace_s"] for i in range(load["windows"]))
    series = []
    for label in labels:
        data = load["series"][label]
        for i, key in enumerate(keys):
            name = label if len(keys) == 1 else f"{label} {key.split('_')[1]}"
            series.append(Series(name, COLORS.get(label, "#555"), xs, tuple(data[key]), dashed=i > 0))
    return render_chart(Chart(title, "trace time (s)", unit, tuple(series)))


def _server_metrics_section(result: dict, labels: list[str]) -> str:
    """The engine's own view over time (queue, batch, KV cache, prefix cache, preemptions) beside the
    client's TTFT, on the same trace clock: where the queue formed."""
    runs = {label: view for label, view in (result.get("server_metrics") or {}).items() if view}
    if not runs:
        return ""
    roles = list(dict.fromkeys(role for view in runs.values() for role in view["series"]))
    ttft = _load_chart(result["load"], labels, "Client TTFT over time (p50 solid, p99 dashed)", "ms",
                       ("ttft_p50_ms", "ttft_p99_ms"))  # fmt: skip
    charts, rows = [ttft], []
    for role in roles:
        shown = {label: view["series"][role] for label, view in runs.items() if role in view["series"]}
        first = next(iter(shown.values()))
        series = tuple(
            Series(label, COLORS.get(label, "#555"), *map(tuple, zip(*s["points"], strict=True)))
            for label, s in shown.items()
        )
        charts.append(render_chart(Chart(first["title"], "trace time (s)", first["unit"], series)))
        for label, s in shown.items():
            peak, mean = _metric_value(s["peak"], s["share"]), _metric_value(s["mean"], s["share"])
            rows.append([escape(first["title"]), escape(label), peak, f"{s['peak_at_s']:,.1f}", mean])
    engines = ", ".join(f"{escape(label)}: {escape(view['engine'])}" for label, view in runs.items())
    intro = (
        f"<p class='muted'>Scraped from the engine's Prometheus endpoint once a second during the run, read "
        f"through the engine table's names ({engines}); times on the trace's clock like the charts above.</p>"
    )
    table = _table(["quantity", "side", "peak", "peak at trace s", "mean"], rows, left_columns=2)
    return (
        "<h2>Server metrics over time</h2>"
        + intro
        + table
        + "<div class='charts'>"
        + "".join(charts)
        + "</div>"
    )


def _metric_value(value: float, share: bool) -> str:
    return f"{value:.1%}" if share else f"{value:,.4g}"


def _bucket_section(result: dict) -> str:
    buckets = result["buckets"]
    if not buckets:
        return ""
    compare = result["mode"] == "compare"
    label = list(result["sides"])[-1]
    out = ["<h2>Per bucket</h2>"]
    titles = {
        "input_tokens": "Input length (tokens)",
        "stream": "Streaming",
        "tools": "Tools",
        "model": "Model",
        "endpoint": "API (endpoint)",
    }
    for dimension in dict.fromkeys(b["dimension"] for b in buckets):
        rows = []
        for bucket in (b for b in buckets if b["dimension"] == dimension):
            for metric in LATENCY_METRICS:
                m = bucket["metrics"][metric]
                cells = [escape(str(bucket["bucket"])), _title(metric)]
                if compare:
                    cells.append(f"{bucket['baseline_requests']:,} / {bucket['candidate_requests']:,}")
                    for q in (50, 95, 99):
                        cmp_row = m["comparison"].get(f"p{q}")
                        if cmp_row is None:
                            cells.append("–")
                            continue
                        ratio = "" if cmp_row["ratio"] is None else f" ({cmp_row['ratio']:.2f}x)"
                        cells.append(
                            f"{_ms(m['baseline'][f'p{q}_ms'])} → {_ms(m['candidate'][f'p{q}_ms'])}{ratio} "
                            + _verdict(cmp_row["verdict"])
                        )
                else:
                    cells.append(f"{bucket['candidate_requests']:,}")
                    cells += [_ms(m[label][f"p{q}_ms"]) for q in (50, 95, 99)]
                rows.append(cells)
        headers = ["bucket", "metric", "requests", "p50 ms", "p95 ms", "p99 ms"]
        out.append(f"<h3>{titles.get(dimension, dimension)}</h3>" + _table(headers, rows, left_columns=2))
    return "".join(out)


def _errors_section(result: dict, labels: list[str]) -> str:
    errors = result["errors"]
    kinds = sorted({k for label in labels for k in errors[label]["by_kind"]})
    headers = ["", *labels]
    rows = [
        ["requests", *(f"{errors[label]['requests']:,}" for label in labels)],
        ["counted (sent, not ended by the client)", *(f"{errors[label]['counted']:,}" for label in labels)],
        ["engine errors", *(f"{errors[label]['engine_errors']:,}" for label in labels)],
        [
            "error rate",
            *(
                "–" if errors[label]["error_rate"] is None else f"{errors[label]['error_rate']:.2%}"
                for label in labels
            ),
        ],
    ]
    for kind in kinds:
        client = (
            " <span class='muted'>(client side)</span>"
            if kind in errors[labels[-1]]["client_side_kinds"]
            else ""
        )
        rows.append(
            [escape(kind) + client, *(str(errors[label]["by_kind"].get(kind, 0)) for label in labels)]
        )
    verdict = ""
    if errors.get("comparison"):
        c = errors["comparison"]
        verdict = (
            f"<p>Error-rate change {c['difference']:+.2%} (95% CI {c['ci_low']:+.2%} … {c['ci_high']:+.2%}): "
            f"{_verdict(c['verdict'])}</p>"
        )
    return "<h2>Errors by kind</h2>" + _table(headers, rows) + verdict + _messages(errors, labels)


def _messages(errors: dict, labels: list[str]) -> str:
    rows = [
        [
            escape(label),
            f"{m['count']:,}",
            escape(m["kind"] or ""),
            "–" if m["status"] is None else str(m["status"]),
            escape(m["message"] or "(no message)"),
        ]
        for label in labels
        for m in errors[label].get("top_messages", ())
    ]
    if not rows:
        return ""
    return "<h3>Commonest error messages</h3>" + _table(
        ["side", "requests", "kind", "status", "message"], rows, left_columns=1, left_last=True
    )


def _slo_section(result: dict) -> str:
    if not result["slos"]:
        return ""
    rows = [
        [
            escape(s["slo"]),
            _ms(s["baseline_ms"]),
            _ms(s["candidate_ms"]),
            f"{s['threshold_ms']:g}",
            _verdict(s["verdict"]),
        ]
        for s in result["slos"]
    ]
    good_rows = []
    for label, g in result["goodput"].items():
        if g:
            share = "–" if g["share"] is None else f"{g['share']:.1%}"
            rate = "–" if g["rate_per_s"] is None else f"{g['rate_per_s']:.2f}"
            good_rows.append([escape(label), f"{g['good_requests']:,} / {g['requests']:,}", share, rate])
    return (
        "<h2>SLOs and goodput</h2>"
        + _table(["SLO", "baseline ms", "candidate ms", "limit ms", "verdict"], rows)
        + "<p class='muted'>Goodput: requests that succeeded and met every per-request threshold (TTFT, TPOT, E2E; "
        "ITL SLOs gate the percentile verdict only).</p>"
        + _table(["side", "good / counted", "share", "rate req/s"], good_rows)
    )


def _redact(value):
    if isinstance(value, dict):
        return {k: ("<redacted>" if SECRET_KEY.search(str(k)) else _redact(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [_redact(v) for v in value]
    return value


def _config_section(result: dict) -> str:
    blocks = []
    for label, side in result["sides"].items():
        text = json.dumps(_redact(side["config"]), indent=2, sort_keys=True, default=str)
        blocks.append(
            f"<div><h3>{escape(label)}: {escape(side['kind'])} configuration</h3><pre>{escape(text)}</pre></div>"
        )
    intro = (
        "<p class='muted'>From run.json (replay: target, engine, speed, scale, machine, versions) or the trace's "
        "metadata (recorder, tokenizer, clock domain). Secrets are never written there; keys that look like one "
        "are redacted here anyway.</p>"
    )
    return "<h2>Run configurations</h2>" + intro + "<div class='cols'>" + "".join(blocks) + "</div>"


def _definitions_section(result: dict) -> str:
    domains = result["clock_domains"]
    items = [
        f"<dt>{escape(BY_NAME[k].title)}</dt><dd>{escape(v)}</dd>"
        for k, v in result["metric_definitions"].items()
    ]
    items.append(
        "<dt>Percentiles</dt><dd>p50/p90/p95/p99, linear interpolation, successful requests only; failed "
        "requests are counted apart, by kind.</dd>"
    )
    for label in result["sides"]:
        items.append(f"<dt>clock: {escape(label)}</dt><dd>{escape(domains.get(label, ''))}</dd>")
    if domains.get("note"):
        items.append(f"<dt>clock note</dt><dd>{escape(domains['note'])}</dd>")
    if domains.get("offset_ttft_ms"):
        items.append(
            f"<dt>--offset-ttft</dt><dd>{domains['offset_ttft_ms']:g} ms subtracted from the candidate's TTFT and E2E</dd>"
        )
    return "<h2>Definitions and clock domains</h2><dl>" + "".join(items) + "</dl>"


def _cold_start_section(result: dict) -> str:
    """Each run's cold start (replayer.measured.cold_start) beside the rest of its requests."""
    rows, notes, rule = [], [], ""
    for label, section in (result.get("cold_start") or {}).items():
        rule = section["rule"]
        if not section["requests"]:
            continue
        where = "warm-up" if section["source"] == "warmup" else "first requests"
        for name, view in section["metrics"].items():
            for part in ("cold", "rest"):
                d = view[part]
                rows.append([escape(label), escape(f"{name.upper()} {part if part == 'rest' else where}"),
                             f"{d['count']:,}", *(_ms(d.get(f"p{q}_ms")) for q in (50, 90, 99))])  # fmt: skip
        if section["note"]:
            notes.append(f"<p><b>note:</b> {escape(section['note'])}</p>")
    if not rows:
        return ""
    table = _table(["side", "requests", "count", "p50 ms", "p90 ms", "p99 ms"], rows, left_columns=2)
    return f"<h2>Cold start</h2><p class='muted'>{escape(rule)}.</p>" + table + "".join(notes)


def _drift_section(result: dict) -> str:
    """A soak's last loop against its first, paired by source request, and its server trends."""
    parts = []
    for label, drift in (result.get("drift") or {}).items():
        rows = [
            [escape(name), *("-" if c is None else escape(f"{c[0]} {c[1]}") for c in cells)]
            for name, cells in drift_rows(drift)
        ]
        rate = drift["cells"].get("error_rate")
        if rate is not None and rate["first"] is not None:
            rows.append(
                ["error rate", f"{rate['first']:.1%} → {rate['last']:.1%}", escape(rate["verdict"]), ""]
            )
        trend_rows = [
            [escape(role), f"{t['first']:.4g}", f"{t['last']:.4g}", f"{t['slope_per_hour']:.4g}", f"{t['r2']:.2f}",
             "rising" if t["rising"] else ""]
            for role, t in drift["trends"].items()
        ]  # fmt: skip
        findings = "".join(f"<li>{escape(line)}</li>" for line in drift["findings"])
        parts.append(
            f"<h3>{escape(label)}: loop {drift['last_loop']} vs loop {drift['first_loop']}</h3>"
            f"<p><b>{escape(drift['headline'])}</b> ({drift['common_requests']['common']} requests paired, "
            f"tolerance ±{drift['tolerance']:.0%})</p>"
            + _table(["metric", "p50", "p95", "p99"], rows)
            + (_table(["series", "first", "last", "slope / h", "r²", ""], trend_rows) if trend_rows else "")
            + (f"<ul>{findings}</ul>" if findings else "")
        )
    return "<h2>Soak drift</h2>" + "".join(parts) if parts else ""
