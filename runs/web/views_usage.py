"""The usage page: tokens and cost of finished runs by model, owner, label, agent or capability over time."""
from __future__ import annotations

import csv

from django.http import HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from core import charts
from core.downloads import as_download
from core.permissions import bad_request, permission_needed
from core.replica import reads_from_replica
from runs.dashboard import periods, usage


def _query(request) -> tuple[dict, dict[str, str]]:
    query = {"window": request.GET.get("window", usage.DEFAULT_WINDOW),
             "group": request.GET.get("group", usage.DEFAULT_GROUP),
             "measure": request.GET.get("measure", "tokens"),
             "label_key": request.GET.get("label_key", "").strip()}
    return query, usage.query_problems(**query)


@reads_from_replica
@permission_needed("runs.view_run", "view usage and cost")
@require_GET
def usage_page(request):
    query, problems = _query(request)
    if problems:
        return bad_request(request, " ".join(problems.values()))
    report = usage.usage_report(window_key=query["window"], group=query["group"], label_key=query["label_key"],
                                now=timezone.now())
    series = usage.chart_series(report, query["measure"])
    unit = "cost" if query["measure"] == "cost" else "tokens"
    chart = charts.stacked_bars(
        title=f"{unit.capitalize()} of finished runs per interval by {query['group']}, {report.window.label}",
        labels=[periods.bucket_label(s, report.window) for s in report.bucket_starts], series=series, y_label=unit,
        x_label="time (hour finished)") if series else None
    context = {**query, "report": report, "chart": chart, "windows": usage.WINDOWS.values(),
               "groups": list(usage.GROUPS), "measures": usage.MEASURES}
    template = "runs/usage.html#usage_body" if request.htmx else "runs/usage.html"
    return render(request, template, context)


def _csv_safe(value: str) -> str:
    # Spreadsheets run cells starting with these as formulas; model names and labels are users' text.
    return "'" + value if value[:1] in ("=", "+", "-", "@", "\t", "\r") else value


@reads_from_replica
@permission_needed("runs.view_run", "view usage and cost")
@require_GET
def usage_csv(request):
    query, problems = _query(request)
    if problems:
        return bad_request(request, " ".join(problems.values()))
    report = usage.usage_report(window_key=query["window"], group=query["group"], label_key=query["label_key"],
                                now=timezone.now())
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    writer = csv.writer(response)
    writer.writerow([query["group"], "runs", "tokens", "cost", "tool_calls"])
    for row in [*report.rows, report.totals]:
        writer.writerow([_csv_safe(row.label), row.runs, round(row.tokens), f"{row.cost:.6f}", row.calls])
    return as_download(response, f"usage-{query['group']}-{query['window']}.csv")
