"""The dashboard's actionable parts: runs burning budget now, stops per capability, trends, drill-down links.

Kept apart from runs.dashboard.periods (the window aggregations) so each can change
alone. A fixed number of queries whatever the number of runs: the active list
reads at most ACTIVE_SCAN live runs (live runs are few: they finish or hit a deadline).
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from urllib.parse import urlencode

from django.urls import reverse
from django.utils import timezone

from core.choices import LIVE_STATUSES
from runs.dashboard import periods as dashboard
from runs.dashboard.budget_usage import run_budget_usage
from runs.models import Run
from runtime.stop import StopKind, StopReason

ACTIVE_SCAN = 200  # each carries its checkpoint (the usage the budgets are enforced against)
ACTIVE_SHOWN = 15
NO_CAPABILITY = "(none)"
BUDGET_WORDS = {"iterations": "iterations", "revisions": "revisions", "tool_calls": "tool calls", "tokens": "tokens",
                "cost": "cost", "retries": "retries", "deadline": "time", "side_effect_rate": "side effects per minute"}


def runs_url(**params) -> str:
    """The runs list filtered to exactly these runs (the list accepts every key used here)."""
    clean = {k: v for k, v in params.items() if v not in (None, "", False)}
    return reverse("runs:list") + ("?" + urlencode(clean) if clean else "")


def local_param(moment: datetime, *, upper: bool = False) -> str:
    """A moment as the list's datetime-local filters read it (the current time zone, to the second).

    An upper bound rounds up to the next whole second, so a run that finished in the
    same second as the dashboard was drawn is still behind its figure.
    """
    if upper and moment.microsecond:
        moment = moment.replace(microsecond=0) + timedelta(seconds=1)
    return timezone.localtime(moment).strftime("%Y-%m-%dT%H:%M:%S")


@dataclass(frozen=True)
class Burn:
    name: str
    label: str
    percent: int


@dataclass(frozen=True)
class ActiveRun:
    run: Run
    burns: list[Burn]
    worst: int
    time_left: timedelta | None


def active_runs_by_burn(*, include_evaluations: bool = False, now: datetime | None = None,
                        limit: int = ACTIVE_SHOWN) -> tuple[list[ActiveRun], int]:
    """Live runs, the most-burnt budget first (percent of each budget used, time left). One query."""
    now = now or timezone.now()
    runs = Run.objects.filter(status__in=LIVE_STATUSES).select_related("owner").only(
        "id", "goal", "status", "budgets", "state", "iterations", "revisions", "tool_calls", "tokens", "cost",
        "retries", "side_effects_committed", "created_at", "started_at", "finished_at", "deadline_at", "stop_reason",
        "evaluation_id", "owner__username")
    if not include_evaluations:
        runs = runs.filter(evaluation__isnull=True)
    scanned = list(runs.order_by("-created_at", "-id")[:ACTIVE_SCAN])
    rows = []
    for run in scanned:
        burns = [Burn(u["name"], f"calls to {u['capability']}" if u.get("capability") else
                      BUDGET_WORDS.get(u["name"], u["name"]), round(100 * u["fraction"]))
                 for u in run_budget_usage(run) if u["limit"]]
        burns.sort(key=lambda b: -b.percent)
        rows.append(ActiveRun(run, burns, burns[0].percent if burns else 0,
                              run.deadline_at - now if run.deadline_at else None))
    rows.sort(key=lambda r: (-r.worst, r.time_left if r.time_left is not None else timedelta.max))
    return rows[:limit], len(scanned)


def stops_per_capability(*, start: datetime, end: datetime, include_evaluations: bool = False) -> list[dict]:
    """Stalls and budget stops in the window, by the capability of the attempt that stopped the run: whole hours
    from the dashboard's rollup, the rest (and runs an evaluation made, when asked for) from the run table."""
    span = dashboard.span_between(start, end)
    rows = dashboard.stop_rows(span=span)
    if include_evaluations:
        rows += dashboard.stop_rows(span=dashboard.Span(start, start, end, span.bucket_s),
                                    runs=Run.objects.filter(evaluation__isnull=False))
    by_capability: dict[str, dict] = {}
    for row in rows:
        reason = StopReason.parse(row["stop_reason"])
        if reason.kind is not StopKind.STALLED and reason.budget is None:
            continue
        name = row["capability_name"] or "(the planner)"
        entry = by_capability.setdefault(name, {"capability": name, "stalls": 0, "budget_stops": 0, "budgets": {}})
        if reason.kind is StopKind.STALLED:
            entry["stalls"] += row["runs"]
        else:
            entry["budget_stops"] += row["runs"]
            budget = str(reason.budget)
            entry["budgets"][budget] = entry["budgets"].get(budget, 0) + row["runs"]
    finished_from = local_param(start)
    for entry in by_capability.values():
        # "(none)": the run stopped without an attempt to blame (e.g. while planning).
        capability = NO_CAPABILITY if entry["capability"] == "(the planner)" else entry["capability"]
        entry["stalls_url"] = runs_url(stop_reason=StopKind.STALLED.value, stop_capability=capability,
                                       finished_from=finished_from)
        entry["budget_url"] = runs_url(stop_kind=StopKind.BUDGET_EXHAUSTED.value, stop_capability=capability,
                                       finished_from=finished_from)
        entry["budget_list"] = sorted(entry["budgets"].items(), key=lambda item: (-item[1], item[0]))
    return sorted(by_capability.values(), key=lambda e: (-(e["stalls"] + e["budget_stops"]), e["capability"]))


def add_previous_stops(current: list[dict], previous: list[dict]) -> None:
    """Each capability's stalls and budget stops in the previous period, beside this one's."""
    before = {row["capability"]: row for row in previous}
    for row in current:
        old = before.get(row["capability"], {})
        row["stalls_before"], row["budget_stops_before"] = old.get("stalls", 0), old.get("budget_stops", 0)


TREND_FIELDS = ("runs_created", "finished_total", "stall_rate", "budget_stop_rate", "repeated_rate")
# For these a rise is bad news (shown in red); for runs created and finished it is neither.
RISE_IS_BAD = {"stall_rate", "budget_stop_rate", "repeated_rate"}


def previous_figures(*, start: datetime, end: datetime) -> dict:
    """The headline figures for [start, end], read as the dashboard reads its own window."""
    return {name: value for name, value in dashboard.period_figures(start=start, end=end).items()
            if name in TREND_FIELDS}


def trends(current: dict, previous: dict) -> dict[str, dict]:
    """Each headline figure against the previous period of the same length."""
    result = {}
    for name in TREND_FIELDS:
        now_value, before = current.get(name), previous.get(name)
        if now_value is None or before is None:
            result[name] = {"text": "no data in the previous period", "direction": "flat"}
            continue
        delta = now_value - before
        is_rate = name.endswith("_rate")
        if abs(delta) < (0.0005 if is_rate else 0.5):
            text, direction = "same as the previous period", "flat"
        else:
            amount = f"{abs(delta) * 100:.1f} points" if is_rate else f"{abs(delta):g}"
            text = f"{'▲' if delta > 0 else '▼'} {amount} vs the previous period"
            if name in RISE_IS_BAD:
                direction = "up" if delta > 0 else "down"
            else:
                direction = "flat"
        before_text = f"{before * 100:.1f} %" if is_rate else f"{before:g}"
        result[name] = {"text": text, "direction": direction, "previous": before_text}
    return result


def drill_down_links(*, start: datetime, end: datetime) -> dict[str, str]:
    """Where each headline card leads: the runs behind the figure."""
    created = {"created_from": local_param(start), "created_to": local_param(end, upper=True)}
    finished = {"finished_from": local_param(start), "finished_to": local_param(end, upper=True)}
    return {
        "runs_created": runs_url(**created),
        "finished_total": runs_url(status="finished", **finished),
        "stall_rate": runs_url(stop_reason=StopKind.STALLED.value, **finished),
        "budget_stop_rate": runs_url(stop_kind=StopKind.BUDGET_EXHAUSTED.value, **finished),
        "repeated_rate": runs_url(repeated="on", **created),
        "active": runs_url(status="active"),
    }
