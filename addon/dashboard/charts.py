"""Charts drawn on the server as SVG: no script, no library, no network (the page works offline).

A stacked bar chart: one bar per day, one colour per series (model or user). The SVG scales to its
container (viewBox); colours come from the stylesheet's `--series-N` variables, so the chart follows
the light or dark scheme. Each segment carries a `<title>` (its value, shown on hover).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from html import escape

from markupsafe import Markup

SERIES_COLOURS = 8
"""`--series-0` ... `--series-7` in dashboard.css; more series reuse them in turn."""


@dataclass(frozen=True)
class Series:
    label: str
    values: Sequence[float]


def nice_ceiling(value: float) -> float:
    """The smallest 1, 2 or 5 times a power of ten at or above `value` (an axis maximum)."""
    if value <= 0:
        return 1.0
    power = 1.0
    while power * 10 <= value:
        power *= 10
    while power > value:
        power /= 10
    for step in (1, 2, 5, 10):
        if step * power >= value:
            return step * power
    return 10 * power  # pragma: no cover - the loop always returns


def stacked_bars(days: Sequence[str], series: Sequence[Series], *, title: str,
                 fmt: Callable[[float], str] = lambda v: f"{v:,.0f}", width: int = 960, height: int = 240) -> Markup:
    """An accessible SVG (role=img, <title>) of `series` stacked per day."""
    left, right, top, bottom = 64, 8, 10, 38
    plot_w, plot_h = width - left - right, height - top - bottom
    totals = [sum(s.values[i] for s in series) for i in range(len(days))]
    ceiling = nice_ceiling(max(totals, default=0))
    parts = [f'<svg class="chart" viewBox="0 0 {width} {height}" role="img" aria-label="{escape(title)}"'
             f' xmlns="http://www.w3.org/2000/svg"><title>{escape(title)}</title>']
    for i in range(5):  # grid lines and y labels at 0, 1/4 ... the ceiling
        value = ceiling * i / 4
        y = top + plot_h - plot_h * i / 4
        parts.append(f'<line class="grid" x1="{left}" x2="{width - right}" y1="{y:.1f}" y2="{y:.1f}"/>')
        parts.append(f'<text class="axis" x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{escape(fmt(value))}</text>')
    slot = plot_w / max(len(days), 1)
    bar = max(min(slot * 0.7, 48), 2)
    label_every = max(1, round(len(days) / 8))
    for d, day in enumerate(days):
        x = left + slot * d + (slot - bar) / 2
        base = top + plot_h
        for n, s in enumerate(series):
            value = s.values[d]
            if value <= 0:
                continue
            h = plot_h * value / ceiling
            base -= h
            parts.append(f'<rect class="s{n % SERIES_COLOURS}" x="{x:.1f}" y="{base:.1f}" width="{bar:.1f}"'
                         f' height="{h:.1f}"><title>{escape(day)} {escape(s.label)}: {escape(fmt(value))}</title></rect>')
        last = len(days) - 1
        if d == last or (d % label_every == 0 and last - d >= label_every / 2):
            parts.append(f'<text class="axis" x="{x + bar / 2:.1f}" y="{height - bottom + 16}" text-anchor="middle">'
                         f'{escape(day[5:] if len(day) == 10 else day)}</text>')
    if not days:
        parts.append(f'<text class="axis" x="{width / 2}" y="{height / 2}" text-anchor="middle">no data</text>')
    parts.append("</svg>")
    return Markup("".join(parts))


def legend(series: Sequence[Series]) -> Markup:
    items = "".join(f'<li><span class="swatch s{n % SERIES_COLOURS}"></span>{escape(s.label)}</li>'
                    for n, s in enumerate(series))
    return Markup(f'<ul class="legend">{items}</ul>')
