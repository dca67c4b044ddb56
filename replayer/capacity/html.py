"""The capacity report: one self-contained HTML file (inline CSS and SVG, no script) of a capacity.json,
and its curves as a standalone SVG. Rendering only: every number shown is read from the document."""

from __future__ import annotations

import math
from html import escape

from replayer.report.html import CSS, SECRET_KEY
from replayer.report.svg import HEIGHT, WIDTH, Chart, Series, render_chart

LATENCY = (("ttft", "TTFT"), ("ttfo", "TTFO"), ("tpot", "TPOT"), ("e2e", "E2E"))
PERCENTILE_COLORS = {"p50": "#3b6ea8", "p95": "#d9622b", "p99": "#b42318"}
MARK_COLORS = {"knee": "#6a3d9a", "limit": "#b42318", "op.": "#17803d"}
CI_COLOR, SLO_COLOR = "#9ca3af", "#8a6d1f"
STOP_WORDS = {
    "converged": None,
    "budget": "the search ran out of --budget before it reached --precision: the points are brackets, not answers",
    "max_factor": "the search reached --max-factor: the limits may lie above the largest load tried",
    "min_factor": "even the smallest factor failed: the SLO limit lies below the loads tried",
    "client_bound": "the client fell behind: the search stopped there, and no step at or above it is the server's limit",
    "interrupted": "the search was interrupted: rerun the same command with the same -o to continue it",
    "max_steps": "the search used its largest number of steps before it reached --precision",
}
CAPACITY_CSS = "table.points td:first-child{font-weight:600}.curves-note{margin:4px 0 0}"
# svg.py's rules for the standalone image, which has no page stylesheet
SVG_CSS = (
    "text{font:11px system-ui,sans-serif;fill:#374151}text.label{font-size:12px;fill:#111827}"
    "text.title{font-size:13px;font-weight:600;fill:#111827}.grid{stroke:#eceef2}.axis{stroke:#9ca3af}"
    ".ref{stroke:#6b7280;stroke-dasharray:3 3}.muted{fill:#6b7280}"
)


def number_text(value) -> str:
    """A number as the report shows it (three significant figures at most below 100); – when unknown."""
    if value is None:
        return "–"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    magnitude = abs(value)
    if magnitude >= 100:
        return f"{value:,.0f}"
    if magnitude >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def percent_text(share) -> str:
    return "–" if share is None else f"{share * 100:.1f}%"


def factor_text(factor) -> str:
    return "–" if factor is None else f"x{factor:.3g}"


def render_capacity_html(capacity: dict) -> str:
    sections = [
        _banner(capacity),
        _header(capacity),
        _warnings(capacity),
        _points(capacity),
        _headroom_and_more(capacity),
        _curves(capacity),
        _steps(capacity),
        _settings(capacity),
    ]
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width'><title>llmreplay capacity</title>"
        f"<style>{CSS}{CAPACITY_CSS}</style></head><body><main>{''.join(s for s in sections if s)}</main></body></html>"
    )


def capacity_svg(capacity: dict) -> str:
    """The curves alone, two a row, as one SVG document (for a README)."""
    charts = [_chart_svg(chart) for chart in _charts(capacity)]
    columns = 2
    rows = math.ceil(len(charts) / columns)
    cell_h = HEIGHT + 24
    width, height = WIDTH * columns, 32 + cell_h * rows
    title = escape(_title_line(capacity))
    parts = [
        f"<svg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 {width} {height}' width='{width}' height='{height}'>",
        f"<style>{SVG_CSS}</style><rect width='100%' height='100%' fill='#ffffff'/>",
        f"<text x='12' y='20' class='title'>{title}</text>",
    ]
    for i, (caption, svg) in enumerate(charts):
        x, y = WIDTH * (i % columns), 32 + cell_h * (i // columns)
        parts.append(f"<text x='{x + 12}' y='{y + 16}' class='title'>{escape(caption)}</text>")
        parts.append(svg.replace("<svg ", f"<svg x='{x}' y='{y + 22}' ", 1))
    parts.append("</svg>")
    return "".join(parts)


def _chart_svg(chart: Chart) -> tuple[str, str]:
    figure = render_chart(chart)
    return chart.title, figure[figure.index("<svg") : figure.rindex("</svg>") + len("</svg>")]


# -- the page, top to bottom ------------------------------------------------------------------------
def _title_line(capacity: dict) -> str:
    settings = capacity.get("settings") or {}
    return f"llmreplay capacity: {settings.get('trace_path', '?')} against {settings.get('target_url', '?')}"


def _banner(capacity: dict) -> str:
    verdict = capacity.get("verdict") or {}
    status = "pass" if verdict.get("passed", verdict.get("exit_code") == 0) else "fail"
    return (
        f"<div class='banner {status} headline'>{escape(str(verdict.get('line', '')))} "
        f"<span class='muted'>(exit status {escape(str(verdict.get('exit_code', '–')))})</span></div>"
    )


def _header(capacity: dict) -> str:
    settings = capacity.get("settings") or {}
    window, warmup = capacity.get("window") or {}, capacity.get("warmup") or {}
    peak = capacity.get("production_peak") or {}
    rows = [
        ["trace", escape(str(settings.get("trace_path", "–")))],
        ["target", escape(str(settings.get("target_url", "–")))],
        ["load axis", f"--by {escape(str(settings.get('by', '–')))}"],
        [
            "window",
            f"{number_text(window.get('start_s'))} s to {number_text(window.get('end_s'))} s of the trace "
            f"({number_text(window.get('length_s'))} s, {number_text(window.get('requests'))} requests"
            + (", the whole trace" if window.get("whole_trace") else "")
            + ")",
        ],
        [
            "warm-up",
            f"{number_text(warmup.get('length_s'))} s from {number_text(warmup.get('start_s'))} s "
            f"({number_text(warmup.get('requests'))} requests), replayed first and never judged",
        ],
        [
            "production peak",
            f"{number_text(peak.get('requests_per_s'))} req/s, {number_text(peak.get('output_tokens_per_s'))} "
            f"output tok/s (the busiest 60 s, from {number_text(peak.get('start_s'))} s)",
        ],
        [
            "search",
            f"{len(capacity.get('steps') or [])} steps, stopped: {escape(str(capacity.get('stop_reason', '–')))}, "
            f"{number_text(capacity.get('elapsed_s'))} s",
        ],
    ]
    return "<h1>llmreplay capacity report</h1>" + _table(["", ""], rows, left=2)


def _warnings(capacity: dict) -> str:
    items = []
    bound = capacity.get("client_bound")
    if bound:
        items.append(
            f"client-bound at step {escape(str(bound.get('step')))} ({factor_text(bound.get('factor'))}): "
            f"{escape(str(bound.get('reason', '')))}. {escape(str(bound.get('advice', '')))}"
        )
    stop = STOP_WORDS.get(capacity.get("stop_reason"))
    if stop and not (bound and capacity.get("stop_reason") == "client_bound"):
        items.append(f"not converged: {escape(stop)}")
    knee = capacity.get("knee")
    if knee and not knee.get("reached"):
        items.append(f"knee {escape(str(knee.get('note', 'not reached')))}")
    limit = capacity.get("slo_limit")
    if limit is None:
        items.append("no step met every SLO: there is no SLO limit, operating point or headroom")
    elif not limit.get("confirmed"):
        items.append("the SLO limit is the search's last passing step, not confirmed by a sustain step")
    if not items:
        return ""
    return (
        "<div class='banner fail'><b>Read with care</b><ul>"
        + "".join(f"<li>{i}</li>" for i in items)
        + "</ul></div>"
    )


def _bracket(bracket) -> str:
    if not bracket:
        return "–"
    lo, hi = (list(bracket) + [None, None])[:2]
    return f"{factor_text(lo)} – {'open' if hi is None else factor_text(hi)}"


def _points(capacity: dict) -> str:
    knee, limit, point = capacity.get("knee"), capacity.get("slo_limit"), capacity.get("operating_point")
    # (name, the point, its req/s key, its output tok/s key, its bracket, what it rests on)
    found = [
        ("knee", knee, "requests_per_s", "output_tokens_per_s", knee and knee.get("bracket"),
         escape(str((knee or {}).get("note", "")))),
        ("SLO limit", limit, "offered_requests_per_s", "offered_output_tokens_per_s", limit and limit.get("bracket"),
         "confirmed by a sustain step" if (limit or {}).get("confirmed") else "not confirmed"),
        ("operating point", point, "offered_requests_per_s", "offered_output_tokens_per_s", None,
         f"{percent_text((point or {}).get('headroom_target'))} of the SLO limit"),
    ]  # fmt: skip
    rows = [
        [
            name,
            factor_text(p.get("factor")),
            number_text(p.get(rate)),
            number_text(p.get(tokens)),
            _bracket(b),
            basis,
        ]
        for name, p, rate, tokens, b, basis in found
        if p
    ]
    if not rows:
        return "<h2>The three points</h2><p class='muted'>none found</p>"
    headers = ["", "factor", "req/s", "output tok/s", "bracket", "basis"]
    return "<h2>The three points</h2>" + _table(headers, rows, left=1, left_last=True, css="points")


def _headroom_and_more(capacity: dict) -> str:
    parts = []
    headroom = capacity.get("headroom")
    if headroom:
        parts.append(
            f"<p class='headline'>{escape(str(headroom.get('text', '')))}</p><p>headroom "
            f"{factor_text(headroom.get('factor'))}: SLO limit {number_text(headroom.get('slo_limit_requests_per_s'))} "
            f"req/s against production's peak minute {number_text(headroom.get('production_peak_requests_per_s'))} req/s"
            "</p>"
        )
    bottleneck = capacity.get("bottleneck")
    if bottleneck:
        parts.append(
            f"<p><b>Bottleneck hint:</b> {escape(str(bottleneck.get('kind', '–')))}: "
            f"{escape(str(bottleneck.get('reason', '')))}</p>"
        )
    cost = capacity.get("cost")
    if cost:
        parts.append(
            f"<p><b>Cost at the operating point:</b> {number_text(cost.get('per_million_output_tokens'))} per million "
            f"output tokens, {number_text(cost.get('per_request'))} per request ({number_text(cost.get('gpus'))} GPUs "
            f"at {number_text(cost.get('gpu_hour_cost'))} an hour). <span class='muted'>"
            f"{escape(str(cost.get('note', '')))}</span></p>"
        )
    return "<h2>Headroom</h2>" + "".join(parts) if parts else ""


def _curves(capacity: dict) -> str:
    charts = _charts(capacity)
    if not charts:
        return ""
    left_out = [s for s in capacity.get("steps") or [] if not _plotted(s)]
    note = (
        f"<p class='muted curves-note'>{len(left_out)} client-bound or interrupted step(s) left out of the curves.</p>"
        if left_out
        else ""
    )
    return (
        "<h2>Curves</h2><p class='muted'>Against the offered load; whiskers: 95% CIs; dashed: the SLO thresholds "
        "and the knee, the SLO limit and the operating point.</p>"
        "<div class='charts'>" + "".join(render_chart(c) for c in charts) + "</div>" + note
    )


def _steps(capacity: dict) -> str:
    headers = [
        "#", "kind", "factor", "offered req/s", "achieved req/s", "goodput", "TTFT p95 ms", "TPOT p95 ms",
        "E2E p95 ms", "SLOs (CI upper bound)", "errors", "lag p99 ms", "verdict",
    ]  # fmt: skip
    rows = []
    for step in capacity.get("steps") or []:
        latency = step.get("latency") or {}
        slos = "<br>".join(
            f"{escape(str(s.get('slo')))}: {number_text(s.get('ci_high_ms'))} ms {escape(str(s.get('verdict')))}"
            for s in step.get("slos") or []
        )
        verdict = escape(str(step.get("verdict", "")))
        reasons = "; ".join(escape(str(r)) for r in step.get("fail_reasons") or [])
        css = {"pass": "s-ok", "fail": "s-fail", "client_bound": "s-warn"}.get(step.get("verdict"), "s-info")
        rows.append(
            [
                number_text(step.get("index")),
                escape(str(step.get("kind", ""))),
                factor_text(step.get("factor")),
                number_text((step.get("offered") or {}).get("requests_per_s")),
                number_text((step.get("achieved") or {}).get("requests_per_s")),
                percent_text((step.get("goodput") or {}).get("share")),
                *(number_text(_cell(latency, m, "p95").get("value_ms")) for m in ("ttft", "tpot", "e2e")),
                slos or "–",
                percent_text((step.get("errors") or {}).get("rate")),
                number_text(step.get("dispatch_lag_p99_ms")),
                f"<span class='{css}'>{verdict}</span>" + (f"<br>{reasons}" if reasons else ""),
            ]
        )
    return "<h2>Steps</h2>" + _table(headers, rows, left=2, left_last=True)


def _settings(capacity: dict) -> str:
    settings = capacity.get("settings") or {}
    items = "".join(
        f"<dt>{escape(str(key))}</dt><dd>{escape(_setting(key, value))}</dd>"
        for key, value in settings.items()
    )
    return f"<h2>Settings</h2><dl>{items}</dl>"


def _setting(key: str, value) -> str:
    if SECRET_KEY.search(key) and key != "api_key_set":
        return "(redacted)"
    if isinstance(value, list | tuple):
        return ", ".join(map(str, value)) or "–"
    return "–" if value is None else str(value)


def _table(headers, rows, left: int = 1, left_last: bool = False, css: str = "") -> str:
    def align(i: int, count: int) -> str:
        return " class='l'" if i < left or (left_last and i == count - 1) else ""

    head = "".join(f"<th{align(i, len(headers))}>{h}</th>" for i, h in enumerate(headers))
    body = "".join(
        "<tr>" + "".join(f"<td{align(i, len(row))}>{c}</td>" for i, c in enumerate(row)) + "</tr>"
        for row in rows
    )
    return f"<table class='{css}'><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


# -- the curves -------------------------------------------------------------------------------------
def _plotted(step: dict) -> bool:
    return step.get("verdict") not in ("client_bound", "interrupted") and _offered(step) is not None


def _offered(step: dict):
    return (step.get("offered") or {}).get("requests_per_s")


def _cell(latency: dict, metric: str, percentile: str) -> dict:
    return (latency.get(metric) or {}).get(percentile) or {}


def _marks(capacity: dict) -> list[tuple[str, float]]:
    """The three points on the offered-load axis: the knee at the throughput it saturates at."""
    knee, limit, point = capacity.get("knee"), capacity.get("slo_limit"), capacity.get("operating_point")
    marks = [
        ("knee", knee.get("requests_per_s") if knee and knee.get("reached") else None),
        ("limit", limit.get("offered_requests_per_s") if limit else None),
        ("op.", point.get("offered_requests_per_s") if point else None),
    ]
    return [(name, x) for name, x in marks if x is not None and x > 0]


def _charts(capacity: dict) -> list[Chart]:
    steps = sorted((s for s in capacity.get("steps") or [] if _plotted(s)), key=_offered)
    if not steps:
        return []
    xs = tuple(_offered(s) for s in steps)
    marks = _marks(capacity)
    positive = [x for x in xs + tuple(x for _, x in marks) if x and x > 0]
    log_x = bool(positive) and max(positive) / min(positive) >= 8
    charts = []
    for metric, title in LATENCY:
        chart = _latency_chart(capacity, steps, xs, metric, title, marks, log_x)
        if chart is not None:
            charts.append(chart)
    charts.append(_throughput_chart(steps, xs, marks, log_x))
    return charts


def _latency_chart(capacity, steps, xs, metric, title, marks, log_x) -> Chart | None:
    cells = {p: [_cell(s.get("latency") or {}, metric, p) for s in steps] for p in PERCENTILE_COLORS}
    if not any(c.get("value_ms") is not None for row in cells.values() for c in row):
        return None
    series = [
        Series(p, color, xs, tuple(c.get("value_ms") for c in cells[p]))
        for p, color in PERCENTILE_COLORS.items()
    ]
    whisker_x, whisker_y = [], []
    for p in PERCENTILE_COLORS:
        for x, cell in zip(xs, cells[p], strict=True):
            if cell.get("ci_low_ms") is not None and cell.get("ci_high_ms") is not None:
                whisker_x += [x, x, None]
                whisker_y += [cell["ci_low_ms"], cell["ci_high_ms"], None]
    if whisker_x:
        series.append(Series("95% CI", CI_COLOR, tuple(whisker_x), tuple(whisker_y)))
    values = [y for s in series for y in s.ys if y is not None]
    thresholds = _thresholds(capacity, metric)
    top = max(values + [t for _, t in thresholds])
    for name, threshold in thresholds:
        series.append(Series(name, SLO_COLOR, (min(xs), max(xs)), (threshold, threshold), dashed=True))
    series += _mark_series(marks, top)
    return Chart(f"{title} vs offered load", "offered load (req/s)", "ms", tuple(series), log_x=log_x)


def _thresholds(capacity: dict, metric: str) -> list[tuple[str, float]]:
    """The SLOs on `metric`, as the steps judged them (one line per distinct threshold)."""
    seen: dict[str, float] = {}
    for step in capacity.get("steps") or []:
        for slo in step.get("slos") or []:
            if slo.get("metric") == metric and slo.get("threshold_ms") is not None:
                seen.setdefault(f"SLO p{_percentile(slo.get('percentile'))}", slo["threshold_ms"])
    return list(seen.items())


def _percentile(value) -> str:
    return f"{value:g}" if isinstance(value, int | float) else str(value)


def _throughput_chart(steps, xs, marks, log_x) -> Chart:
    achieved = tuple((s.get("achieved") or {}).get("requests_per_s") for s in steps)
    # goodput served: achieved x the share meeting every SLO (the knee's basis); `rate_per_s` counts by
    # arrival, which above saturation is the offered load whatever the server did
    goodput = tuple(_served(s.get("goodput") or {}) for s in steps)
    series = [
        Series("offered", CI_COLOR, xs, xs, dashed=True),
        Series("achieved", "#3b6ea8", xs, achieved),
        Series("goodput", "#17803d", xs, goodput),
    ]
    top = max([y for y in achieved + goodput + xs if y is not None])
    series += _mark_series(marks, top)
    return Chart(
        "Throughput and goodput vs offered load", "offered load (req/s)", "req/s", tuple(series), log_x=log_x
    )


def _served(goodput: dict) -> float | None:
    served = goodput.get("served_per_s")
    return served if served is not None else goodput.get("rate_per_s")  # a capacity.json before served_per_s


def _mark_series(marks, top: float) -> list[Series]:
    return [Series(name, MARK_COLORS[name], (x, x), (0.0, top), dashed=True) for name, x in marks]
