"""The score dashboard page: one score config's spread and trend, overall and by a grouping."""
from __future__ import annotations

from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from core import charts
from core.errors import InvalidInput
from core.permissions import bad_request, permission_needed
from core.replica import reads_from_replica
from review import insights
from review.autoscores import COMPLETION_VERIFIED
from review.models import ScoreConfig, ScoreKind
from runs.dashboard import periods


def _what(report: insights.ScoreInsights) -> str:
    """What the headline figure of a row is, in words."""
    kind = report.config.kind
    if kind == ScoreKind.BOOLEAN:
        return "share of yes"
    if kind == ScoreKind.CATEGORICAL:
        return f"share of “{report.headline}”" if report.headline else "share"
    return "mean"


@reads_from_replica
@permission_needed("review.view_score", "view scores")
@require_GET
def insights_page(request):
    configs = list(ScoreConfig.objects.order_by("-builtin", "name"))
    query = {"window": request.GET.get("window", insights.DEFAULT_WINDOW),
             "group": request.GET.get("group", insights.DEFAULT_GROUP),
             "label_key": request.GET.get("label_key", "").strip()[:200]}
    problems = insights.query_problems(**query)
    if problems:
        return bad_request(request, " ".join(problems.values()))
    # The runtime's completion_verified is the score every finished run has: the page opens on it.
    names = [c.name for c in configs]
    name = request.GET.get("config", "")[:200] or (COMPLETION_VERIFIED if COMPLETION_VERIFIED in names else
                                                    (names[0] if names else ""))
    context = {**query, "config_name": name, "configs": configs, "windows": insights.WINDOWS.values(),
               "groups": insights.GROUPS, "report": None}
    if configs:
        try:
            report = insights.score_insights(config=insights.config_named(name), window_key=query["window"],
                                             group=query["group"], label_key=query["label_key"], now=timezone.now())
        except InvalidInput as exc:
            return bad_request(request, exc.message)
        what = _what(report)
        numeric = report.config.kind == ScoreKind.NUMERIC
        scale = 1 if numeric else 100   # shares are drawn in percent
        spread: list[tuple[str, float]] = list(zip(report.bin_labels, report.overall.bins, strict=True))
        context.update(
            report=report, spread=spread, what=what, percent=not numeric,
            chart=charts.bars(title=f"{report.config.name}: scores per {'range' if numeric else 'value'}",
                              items=spread, x_label="scores"),
            trend=charts.stacked_bars(
                title=f"{report.config.name}: {what} per interval, {report.window.label}",
                labels=[periods.bucket_label(s, report.window) for s in report.bucket_starts],
                series={what: [round(v * scale, 3) if v is not None else 0 for v in report.overall.trend]},
                y_label="mean" if numeric else "%", x_label="time (score written)"),
            rows=[(f, charts.spark_bars(f.bins, step=4), charts.spark_bars(f.trend)) for f in report.groups],
            spread_width=len(report.bin_labels) * 4, trend_width=len(report.bucket_starts) * 5)
    template = "review/insights.html#insights_body" if request.htmx else "review/insights.html"
    return render(request, template, context)
