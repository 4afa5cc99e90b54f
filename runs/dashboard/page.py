"""The dashboard page's data, built outside the view: a window's figures, its charts, and what needs action now."""
from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any

from core import charts
from runs.dashboard import active, periods
from runtime.stop import StopKind, stop_reason


@dataclass(frozen=True)
class DashboardPage:
    figures: dict[str, Any]     # the window's figures (periods.dashboard) with their charts
    label: str
    label_problems: list[str]
    active_runs: list
    active_total: int
    links: dict[str, str]
    trends: dict[str, Any]
    capability_stops: list
    include_evaluations: bool

    def context(self) -> dict[str, Any]:
        # The template reads the window's figures at the top level, beside the rest.
        return {**self.figures, **{f.name: getattr(self, f.name) for f in fields(self) if f.name != "figures"}}


def dashboard_page(*, window_key: str, now: datetime, label: str, labels: tuple, label_problems: list[str],
                   include_evaluations: bool) -> DashboardPage:
    data = periods.dashboard(window_key=window_key, now=now, labels=labels if not label_problems else ())
    window = data["window"]
    # The same figures one window earlier, for the trend beside each card.
    previous = active.previous_figures(start=data["start"] - window.span, end=data["start"])
    active_rows, active_total = active.active_runs_by_burn(include_evaluations=include_evaluations, now=now)
    bucket_links = [active.runs_url(created_from=active.local_param(start),
                                    created_to=active.local_param(min(start + window.bucket, now), upper=True))
                    for start in data["bucket_starts"]] if "bucket_starts" in data else None
    finished_links = [active.runs_url(status="finished", finished_from=active.local_param(start),
                                      finished_to=active.local_param(min(start + window.bucket, now), upper=True))
                      for start in data["bucket_starts"]] if "bucket_starts" in data else None
    data["outcomes_chart"] = charts.stacked_bars(
        title=f"Runs created per interval by outcome, {window.label}", labels=data["labels"],
        series=data["outcomes"], y_label="runs", x_label="time", links=bucket_links) if data["outcomes"] else None
    data["stop_chart"] = charts.stacked_bars(
        title=f"Runs finished per interval by stop reason, {window.label}", labels=data["labels"],
        series=data["stop_reasons"], y_label="runs", x_label="time",
        links=finished_links) if data["stop_reasons"] else None
    data["budget_chart"] = charts.bars(
        title="Runs stopped per exhausted budget", items=data["budget_stops"], x_label="runs stopped",
        links=[active.runs_url(stop_reason=stop_reason(StopKind.BUDGET_EXHAUSTED, name),
                               finished_from=active.local_param(data["start"]))
               for name, _ in data["budget_stops"]]) if data["budget_stops"] else None
    for row in data["capabilities"]:
        row["runs_url"] = active.runs_url(capability=row["capability_name"],
                                          created_from=active.local_param(data["start"]))
    capability_stops = active.stops_per_capability(start=data["start"], end=data["end"],
                                                   include_evaluations=include_evaluations)
    active.add_previous_stops(capability_stops, active.stops_per_capability(
        start=data["start"] - window.span, end=data["start"], include_evaluations=include_evaluations))
    return DashboardPage(
        figures=data, label=label, label_problems=label_problems, active_runs=active_rows,
        active_total=active_total, links=active.drill_down_links(start=data["start"], end=data["end"]),
        trends=active.trends(data, previous), capability_stops=capability_stops,
        include_evaluations=include_evaluations)
