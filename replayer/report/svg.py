"""Inline SVG line charts for the HTML report: linear or log axes, gaps for missing points.

Self-made so the report needs no JavaScript and no network; text is escaped here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from html import escape

WIDTH, HEIGHT = 640, 300
MARGIN_LEFT, MARGIN_RIGHT, MARGIN_TOP, MARGIN_BOTTOM = 64, 16, 28, 44


@dataclass(frozen=True, slots=True)
class Series:
    name: str
    color: str
    xs: tuple[float | None, ...]
    ys: tuple[float | None, ...]
    dashed: bool = False


@dataclass(frozen=True, slots=True)
class Chart:
    title: str
    x_label: str
    y_label: str
    series: tuple[Series, ...]
    log_x: bool = False
    y_from_zero: bool = True
    y_max: float | None = None
    vertical_lines: tuple[float, ...] = ()  # reference values on the x axis (for example ratio 1.0)


def format_number(value: float) -> str:
    magnitude = abs(value)
    if magnitude >= 10_000:
        return f"{value / 1000:,.0f}k"
    if magnitude >= 100:
        return f"{value:,.0f}"
    if magnitude >= 10:
        return f"{value:.0f}" if value == round(value) else f"{value:.1f}"
    if magnitude >= 1 or magnitude == 0:
        return f"{value:g}"
    return f"{value:.2g}"


def linear_ticks(low: float, high: float, count: int = 5) -> list[float]:
    if high <= low:
        high = low + 1.0
    raw = (high - low) / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if (high - low) / (m * magnitude) <= count)
    first = math.ceil(low / step) * step
    ticks, value = [], first
    while value <= high + step * 1e-9:
        ticks.append(round(value, 12))
        value += step
    return ticks


def log_ticks(low: float, high: float) -> list[float]:
    ticks = []
    for exponent in range(math.floor(math.log10(low)), math.ceil(math.log10(high)) + 1):
        for mantissa in (1, 2, 5):
            value = mantissa * 10.0**exponent
            if low <= value <= high:
                ticks.append(value)
    if len(ticks) > 9:
        ticks = [t for t in ticks if f"{t:e}".startswith("1")]
    return ticks or [low, high]


def render_chart(chart: Chart) -> str:
    points = [
        (x, y)
        for s in chart.series
        for x, y in zip(s.xs, s.ys, strict=True)
        if x is not None and y is not None and (not chart.log_x or x > 0)
    ]
    if not points:
        return _frame(chart, "<text x='50%' y='50%' text-anchor='middle' class='muted'>no data</text>")
    x_low, x_high = min(p[0] for p in points), max(p[0] for p in points)
    for line in chart.vertical_lines:
        x_low, x_high = min(x_low, line), max(x_high, line)
    y_low = 0.0 if chart.y_from_zero else min(p[1] for p in points)
    y_high = chart.y_max if chart.y_max is not None else max(p[1] for p in points)
    if y_high <= y_low:
        y_high = y_low + 1.0
    if chart.log_x:
        if x_high <= x_low:
            x_low, x_high = x_low / 2, x_high * 2
        x_ticks = log_ticks(x_low, x_high)
        scale_x = _log_scale(x_low, x_high)
    else:
        x_ticks = linear_ticks(x_low, x_high)
        x_low, x_high = min(x_low, x_ticks[0]), max(x_high, x_ticks[-1])
        scale_x = _linear_scale(x_low, x_high, MARGIN_LEFT, WIDTH - MARGIN_RIGHT)
    y_ticks = linear_ticks(y_low, y_high)
    y_high = max(y_high, y_ticks[-1])
    scale_y = _linear_scale(y_low, y_high, HEIGHT - MARGIN_BOTTOM, MARGIN_TOP)
    body = [_axes(x_ticks, y_ticks, scale_x, scale_y)]
    for line in chart.vertical_lines:
        x = scale_x(line)
        body.append(
            f"<line x1='{x:.1f}' x2='{x:.1f}' y1='{MARGIN_TOP}' y2='{HEIGHT - MARGIN_BOTTOM}' class='ref'/>"
        )
    for series in chart.series:
        body.append(_path(series, scale_x, scale_y, chart.log_x))
    body.append(_legend(chart.series))
    return _frame(chart, "".join(body))


def _linear_scale(low: float, high: float, out_low: float, out_high: float):
    span = (high - low) or 1.0
    return lambda v: out_low + (v - low) / span * (out_high - out_low)


def _log_scale(low: float, high: float):
    log_low, log_high = math.log10(low), math.log10(high)
    span = (log_high - log_low) or 1.0
    width = WIDTH - MARGIN_RIGHT - MARGIN_LEFT
    return lambda v: MARGIN_LEFT + (math.log10(max(v, low)) - log_low) / span * width


def _axes(x_ticks, y_ticks, scale_x, scale_y) -> str:
    parts = []
    bottom, top = HEIGHT - MARGIN_BOTTOM, MARGIN_TOP
    for tick in y_ticks:
        y = scale_y(tick)
        parts.append(
            f"<line x1='{MARGIN_LEFT}' x2='{WIDTH - MARGIN_RIGHT}' y1='{y:.1f}' y2='{y:.1f}' class='grid'/>"
        )
        parts.append(
            f"<text x='{MARGIN_LEFT - 6}' y='{y + 4:.1f}' text-anchor='end'>{format_number(tick)}</text>"
        )
    for tick in x_ticks:
        x = scale_x(tick)
        parts.append(f"<line x1='{x:.1f}' x2='{x:.1f}' y1='{top}' y2='{bottom}' class='grid'/>")
        parts.append(f"<text x='{x:.1f}' y='{bottom + 16}' text-anchor='middle'>{format_number(tick)}</text>")
    parts.append(
        f"<line x1='{MARGIN_LEFT}' x2='{WIDTH - MARGIN_RIGHT}' y1='{bottom}' y2='{bottom}' class='axis'/>"
    )
    parts.append(f"<line x1='{MARGIN_LEFT}' x2='{MARGIN_LEFT}' y1='{top}' y2='{bottom}' class='axis'/>")
    return "".join(parts)


def _path(series: Series, scale_x, scale_y, log_x: bool) -> str:
    segments, current = [], []
    for x, y in zip(series.xs, series.ys, strict=True):
        if x is None or y is None or (log_x and x <= 0):
            if current:
                segments.append(current)
            current = []
            continue
        current.append(f"{scale_x(x):.1f},{scale_y(y):.1f}")
    if current:
        segments.append(current)
    dash = " stroke-dasharray='5 4'" if series.dashed else ""
    out = []
    for segment in segments:
        if len(segment) == 1:
            x, y = segment[0].split(",")
            out.append(f"<circle cx='{x}' cy='{y}' r='2.5' fill='{series.color}'/>")
        else:
            out.append(
                f"<polyline points='{' '.join(segment)}' fill='none' stroke='{series.color}' stroke-width='2'{dash}/>"
            )
    return "".join(out)


def _legend(series: tuple[Series, ...]) -> str:
    parts, x = [], MARGIN_LEFT
    for s in series:
        dash = " stroke-dasharray='5 4'" if s.dashed else ""
        parts.append(
            f"<line x1='{x}' x2='{x + 18}' y1='14' y2='14' stroke='{s.color}' stroke-width='3'{dash}/>"
            f"<text x='{x + 22}' y='18'>{escape(s.name)}</text>"
        )
        x += 30 + 7 * len(s.name)
    return "".join(parts)


def _frame(chart: Chart, body: str) -> str:
    return (
        f"<figure class='chart'><figcaption>{escape(chart.title)}</figcaption>"
        f"<svg viewBox='0 0 {WIDTH} {HEIGHT}' width='{WIDTH}' height='{HEIGHT}' role='img' "
        f"aria-label='{escape(chart.title)}'>{body}"
        f"<text x='{(MARGIN_LEFT + WIDTH - MARGIN_RIGHT) / 2}' y='{HEIGHT - 6}' text-anchor='middle' class='label'>"
        f"{escape(chart.x_label)}</text>"
        f"<text transform='translate(14 {(HEIGHT - MARGIN_BOTTOM + MARGIN_TOP) / 2}) rotate(-90)' "
        f"text-anchor='middle' class='label'>{escape(chart.y_label)}</text></svg></figure>"
    )
