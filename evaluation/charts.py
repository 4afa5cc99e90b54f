"""Success against cost and against latency, one point per mode (and per baseline mode).

Built on core.charts (its frame, axis scale and palette); every label is escaped
before the markup is marked safe.
"""
from __future__ import annotations

import math
from typing import Any

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from core.charts import _open

MODE_COLOURS = {"direct": "#56607a", "planning": "#2457c5"}


def nice_max(value: float) -> float:
    """The smallest 4 x (1, 2, 2.5 or 5 x 10^k) at or above value, for fractions too (costs are small)."""
    if value <= 0:
        return 1.0
    exponent = math.floor(math.log10(value / 4))
    for step in (1, 2, 2.5, 5, 10):
        top = step * 10 ** exponent * 4
        if top >= value:
            return top
    return value


def scatter(*, title: str, points: list[dict[str, Any]], x_label: str, y_label: str, x_format: str = "{:g}",
            width: int = 420, height: int = 260) -> SafeString:
    """points: {"label", "x", "y" (0..1), "colour", "hollow"}. y is a rate shown in percent."""
    left, right, top, bottom = 48, 16, 14, 42
    plot_w, plot_h = width - left - right, height - top - bottom
    x_max = nice_max(max((p["x"] for p in points), default=0) * 1.1)
    summary = "; ".join(f"{p['label']}: {y_label} {p['y'] * 100:.0f}%, {x_label} {x_format.format(p['x'])}"
                        for p in points) or "no data"
    parts = [_open(title, width, height, summary),
             f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + plot_h}" stroke="#98a2b3"/>',
             f'<line x1="{left}" y1="{top + plot_h}" x2="{left + plot_w}" y2="{top + plot_h}" stroke="#98a2b3"/>']
    for k in range(5):
        y = top + plot_h - plot_h * k / 4
        parts.append(f'<text x="{left - 4}" y="{y + 3:.1f}" text-anchor="end">{25 * k}%</text>')
        x = left + plot_w * k / 4
        parts.append(f'<text x="{x:.1f}" y="{top + plot_h + 14}" text-anchor="middle">'
                     f"{escape(x_format.format(x_max * k / 4))}</text>")
        if k:
            parts.append(f'<line x1="{left}" y1="{y:.1f}" x2="{left + plot_w}" y2="{y:.1f}" stroke="#eef0f4"/>')
    for p in points:
        cx = left + plot_w * (p["x"] / x_max if x_max else 0)
        cy = top + plot_h - plot_h * max(0.0, min(1.0, p["y"]))
        fill = "#fff" if p.get("hollow") else p["colour"]
        parts.append(f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="6" fill="{fill}" stroke="{p["colour"]}" '
                     f'stroke-width="2"><title>{escape(p["label"])}: {p["y"] * 100:.0f}% success, '
                     f'{escape(x_format.format(p["x"]))}</title></circle>')
        # Baseline labels sit below their point, so a mode that did not move stays readable.
        label_y = cy + 18 if p.get("hollow") else cy - 9
        parts.append(f'<text x="{cx + 8:.1f}" y="{label_y:.1f}" class="point-label">{escape(p["label"])}</text>')
    parts.append(f'<text x="{left + plot_w / 2:.1f}" y="{height - 6}" text-anchor="middle" class="axis-label">'
                 f"{escape(x_label)}</text>")
    parts.append(f'<text transform="translate(11 {top + plot_h / 2:.1f}) rotate(-90)" text-anchor="middle" '
                 f'class="axis-label">{escape(y_label)}</text></svg>')
    return mark_safe("".join(parts))


def _points(summary: dict[str, Any], measure: str, suffix: str = "", hollow: bool = False) -> list[dict[str, Any]]:
    points = []
    for mode, values in ((summary or {}).get("modes") or {}).items():
        if values.get("success_rate") is None or values.get(measure) is None:
            continue
        points.append({"label": f"{mode}{suffix}", "x": float(values[measure]), "y": float(values["success_rate"]),
                       "colour": MODE_COLOURS.get(mode, "#475467"), "hollow": hollow})
    return points


def evaluation_charts(summary: dict[str, Any], baseline_summary: dict[str, Any] | None = None) -> dict[str, Any]:
    """Two charts: success rate against total cost, and against mean (simulated) latency."""
    if not (summary or {}).get("modes"):
        return {}
    charts = {}
    for key, measure, x_label, fmt in (("cost", "total_cost", "total cost", "{:.4g}"),
                                       ("latency", "mean_latency_s", "mean latency (s, simulated)", "{:.3g}")):
        points = _points(summary, measure)
        if baseline_summary:
            points = _points(baseline_summary, measure, " (baseline)", hollow=True) + points
        charts[key] = scatter(title=f"Success rate against {x_label}, per mode", points=points, x_label=x_label,
                              y_label="success rate", x_format=fmt)
    return charts
