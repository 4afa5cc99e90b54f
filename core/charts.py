"""Small server-side SVG charts: no JavaScript, no dependencies, readable without colour.

Every label passes through escape(); the returned markup is marked safe only
after that, so run data can never inject markup into a chart.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from runtime.stop import RunStatus, StopKind

PALETTE = ["#2457c5", "#1f7a3d", "#b42318", "#9a5b00", "#6941c6", "#0e7490", "#56607a", "#c11574", "#475467"]
SERIES_COLOURS: dict[str, str] = {   # run statuses and stop kinds (the series the dashboard draws)
    RunStatus.COMPLETED: "#1f7a3d", RunStatus.STOPPED: "#b42318", RunStatus.CANCELLED: "#56607a",
    RunStatus.RUNNING: "#2457c5", RunStatus.QUEUED: "#7aa2ff", RunStatus.AWAITING_APPROVAL: "#9a5b00",
    StopKind.BUDGET_EXHAUSTED: "#9a5b00", StopKind.TERMINAL_FAILURE: "#b42318", StopKind.STALLED: "#c11574",
    StopKind.PLAN_REJECTED: "#6941c6", StopKind.APPROVAL_REJECTED: "#0e7490", StopKind.APPROVAL_EXPIRED: "#b54708",
    StopKind.INTERNAL_ERROR: "#475467", StopKind.SESSION_ENDED: "#344054",
}


def colour_for(name: str, position: int) -> str:
    return SERIES_COLOURS.get(name, PALETTE[position % len(PALETTE)])


def _nice_max(value: float) -> float:
    """The smallest 4 x (1, 2, 2.5 or 5 x 10^k) at or above value, so the 4 gridlines read well."""
    if value <= 0:
        return 4
    # Counts keep whole gridlines (4 at least); a share or a mean under 1 gets tenths or finer.
    magnitude = 10 ** math.floor(math.log10(value / 4)) if value < 1 else 10 ** max(0, len(str(int(value / 4))) - 1)
    while True:
        for step in (1, 2, 2.5, 5):
            if step * magnitude * 4 >= value:
                return step * magnitude * 4
        magnitude *= 10


def _linked(markup: str, href: str | None) -> str:
    """A bar inside a link to the runs behind it (the dashboard's drill-down)."""
    return f'<a href="{escape(href)}">{markup}</a>' if href else markup


def stacked_bars(*, title: str, labels: list[str], series: dict[str, list[float]], y_label: str,
                 x_label: str, width: int = 720, height: int = 240, links: list[str] | None = None) -> SafeString:
    """Stacked vertical bars, one per label; series keeps its order in the legend.

    links: one URL per label; each bar then opens it.
    """
    left, right, top, bottom = 52, 10, 12, 50
    plot_w, plot_h = width - left - right, height - top - bottom
    totals = [sum(values[i] for values in series.values()) for i in range(len(labels))]
    y_max = _nice_max(max(totals, default=0))
    n = max(len(labels), 1)
    slot = plot_w / n
    bar_w = max(2.0, slot * 0.75)
    parts = [_open(title, width, height, _summary_stacked(labels, series, totals), "bar-chart", bool(links))]
    parts += _y_axis(left, top, plot_w, plot_h, y_max, y_label)
    label_every = max(1, n // 8)
    for i, label in enumerate(labels):
        x = left + i * slot + (slot - bar_w) / 2
        y = top + plot_h
        for position, (name, values) in enumerate(series.items()):
            value = values[i]
            if not value:
                continue
            h = plot_h * value / y_max
            y -= h
            parts.append(_linked(
                f'<rect x="{x:.1f}" y="{y:.1f}" width="{bar_w:.1f}" height="{h:.1f}" fill="{colour_for(name, position)}">'
                f"<title>{escape(label)}: {escape(name)} {value:g}</title></rect>", links[i] if links else None))
        if i % label_every == 0:
            parts.append(f'<text x="{x + bar_w / 2:.1f}" y="{top + plot_h + 17}" text-anchor="middle">'
                         f"{escape(label)}</text>")
    parts.append(f'<text x="{left + plot_w / 2:.1f}" y="{height - 6}" text-anchor="middle" class="axis-label">'
                 f"{escape(x_label)}</text>")
    parts.append("</svg>")
    return mark_safe("".join(parts) + _legend(series.keys()))


def bars(*, title: str, items: list[tuple[str, float]], x_label: str, width: int = 520,
         row_height: int = 28, links: list[str] | None = None) -> SafeString:
    """Horizontal bars, one row per item, with the value printed beside each bar (and a link per item)."""
    left, right, top = 170, 50, 8
    height = top * 2 + row_height * max(len(items), 1) + 18
    plot_w = width - left - right
    x_max = max((v for _, v in items), default=0) or 1
    summary = "; ".join(f"{label}: {value:g}" for label, value in items) or "no data"
    parts = [_open(title, width, height, summary, "bar-chart", bool(links))]
    for i, (label, value) in enumerate(items):
        y = top + i * row_height
        w = plot_w * value / x_max
        parts.append(f'<text x="{left - 6}" y="{y + row_height * 0.65:.1f}" text-anchor="end">{escape(label)}</text>')
        parts.append(_linked(f'<rect x="{left}" y="{y + 3}" width="{w:.1f}" height="{row_height - 8}" '
                             f'fill="{PALETTE[0]}"><title>{escape(label)}: {value:g}</title></rect>',
                             links[i] if links else None))
        parts.append(f'<text x="{left + w + 4:.1f}" y="{y + row_height * 0.65:.1f}">{value:g}</text>')
    parts.append(f'<text x="{left + plot_w / 2:.1f}" y="{height - 4}" text-anchor="middle" class="axis-label">'
                 f"{escape(x_label)}</text>")
    parts.append("</svg>")
    return mark_safe("".join(parts))


SPARK_HEIGHT = 16


def spark_bars(values: Sequence[float | None], *, step: int = 5) -> tuple:
    """A sparkline's bars: (x, y, height, value) each, the largest value SPARK_HEIGHT high and any other
    non-zero value at least 1 high (None and 0 draw nothing), `step` pixels apart."""
    top = max((v for v in values if v), default=0) or 1
    bars = []
    for n, value in enumerate(values):
        height = max(1, round(SPARK_HEIGHT * value / top)) if value else 0
        bars.append((n * step, SPARK_HEIGHT - height, height, value))
    return tuple(bars)


def _open(title: str, width: int, height: int, summary: str, css_class: str = "", linked: bool = False) -> str:
    class_attr = f' class="{css_class}"' if css_class else ""
    # A chart whose bars are links is a group of links, not one image (an image may not hold links).
    role = "group" if linked else "img"
    return (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" role="{role}" '
            f'aria-label="{escape(title)}"{class_attr}><title>{escape(title)}</title><desc>{escape(summary)}</desc>')


def _y_axis(left, top, plot_w, plot_h, y_max, y_label) -> list[str]:
    parts = [f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + plot_h}" stroke="#98a2b3"/>',
             f'<line x1="{left}" y1="{top + plot_h}" x2="{left + plot_w}" y2="{top + plot_h}" stroke="#98a2b3"/>']
    for k in range(5):
        value = y_max * k / 4
        y = top + plot_h - plot_h * k / 4
        parts.append(f'<text x="{left - 4}" y="{y + 3:.1f}" text-anchor="end">{value:g}</text>')
        if k:
            parts.append(f'<line x1="{left}" y1="{y:.1f}" x2="{left + plot_w}" y2="{y:.1f}" stroke="#eef0f4"/>')
    parts.append(f'<text transform="translate(11 {top + plot_h / 2:.1f}) rotate(-90)" text-anchor="middle" '
                 f'class="axis-label">{escape(y_label)}</text>')
    return parts


def _summary_stacked(labels, series, totals) -> str:
    grand = sum(totals)
    per_series = ", ".join(f"{name} {sum(values):g}" for name, values in series.items() if sum(values))
    return f"{grand:g} in total over {len(labels)} intervals" + (f": {per_series}" if per_series else "")


def _legend(names) -> str:
    # SVG swatches, not style attributes: the Content-Security-Policy allows no inline styles.
    items = "".join(f'<li><svg class="swatch" viewBox="0 0 10 10" aria-hidden="true"><rect width="10" height="10" '
                    f'fill="{colour_for(name, i)}"/></svg>{escape(name)}</li>' for i, name in enumerate(names))
    return f'<ul class="legend">{items}</ul>'
