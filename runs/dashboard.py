"""Aggregations for the dashboard, computed in the database.

Each function issues a fixed number of queries and returns at most
(buckets x categories) or (capabilities) rows, whatever the number of runs.
Percentiles: PostgreSQL computes percentile_cont itself; elsewhere (SQLite) a
window query returns only the nearest-rank rows, never every latency.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import connection
from django.db.models import (Aggregate, Avg, Count, DurationField, ExpressionWrapper, F, FloatField, Func,
                              IntegerField, Q, QuerySet)
from django.db.models.functions import RowNumber
from django.db.models.expressions import Window
from django.utils import timezone

from runs.choices import FINISHED_STATUSES, RunStatus
from runs.models import Approval, Attempt, Run


@dataclass(frozen=True)
class TimeWindow:
    key: str
    label: str
    span: timedelta
    bucket: timedelta


WINDOWS = {
    "1h": TimeWindow("1h", "last hour", timedelta(hours=1), timedelta(minutes=5)),
    "24h": TimeWindow("24h", "last 24 hours", timedelta(hours=24), timedelta(hours=1)),
    "7d": TimeWindow("7d", "last 7 days", timedelta(days=7), timedelta(hours=6)),
    "30d": TimeWindow("30d", "last 30 days", timedelta(days=30), timedelta(days=1)),
}
DEFAULT_WINDOW = "24h"
OUTCOMES = [s.value for s in RunStatus]
STOP_GROUPS = ["completed", "budget_exhausted", "terminal_failure", "stalled", "plan_rejected",
               "approval_rejected", "approval_expired", "cancelled", "internal_error"]


class PercentileCont(Aggregate):
    """PostgreSQL's percentile_cont(fraction) WITHIN GROUP (ORDER BY expression)."""

    function = "PERCENTILE_CONT"
    template = "%(function)s(%(fraction)s) WITHIN GROUP (ORDER BY %(expressions)s)"
    output_field = FloatField()

    def __init__(self, expression, fraction: float, **extra):
        super().__init__(expression, fraction=float(fraction), **extra)


def window_bounds(window: TimeWindow, now: datetime) -> tuple[datetime, datetime, list[datetime]]:
    """The window's start and end, and the start of each bucket (aligned to the bucket size)."""
    step = int(window.bucket.total_seconds())
    epoch = int(now.timestamp())
    end_bucket = datetime.fromtimestamp(epoch - epoch % step, tz=now.tzinfo)
    count = int(window.span / window.bucket)
    starts = [end_bucket - window.bucket * (count - 1 - i) for i in range(count)]
    return starts[0], now, starts


class BucketIndex(Func):
    """The bucket (0, 1, ...) a moment falls in, counting from `start` in steps of `seconds`.

    Computed with the database's own date arithmetic: Django's Trunc functions
    are a Python callback per row on SQLite, about a second per 100,000 runs.
    """

    output_field = IntegerField()

    def __init__(self, expression, *, start: datetime, seconds: float):
        super().__init__(expression)
        self.start_epoch = start.timestamp()
        self.seconds = float(seconds)

    def as_sql(self, compiler, connection, **extra_context):
        sql, params = compiler.compile(self.source_expressions[0])
        return (f"CAST(FLOOR((EXTRACT(EPOCH FROM {sql}) - %s) / %s) AS INTEGER)",
                (*params, self.start_epoch, self.seconds))

    def as_sqlite(self, compiler, connection, **extra_context):
        sql, params = compiler.compile(self.source_expressions[0])
        # julianday() of the stored UTC text; 2440587.5 is the Unix epoch as a Julian day.
        return (f"CAST(((julianday({sql}) - 2440587.5) * 86400.0 - %s) / %s AS INTEGER)",
                (*params, self.start_epoch, self.seconds))


def _bucketed(queryset: QuerySet, field: str, category: str, starts: list[datetime], window: TimeWindow) -> list:
    """Rows {"i": bucket index, category: value, "n": count}, grouped in the database."""
    index = BucketIndex(field, start=starts[0], seconds=window.bucket.total_seconds())
    return list(queryset.annotate(i=index).values("i", category).annotate(n=Count("id")).order_by())


def _series_over_time(rows, key, starts, names: list[str], group=lambda v: v) -> dict[str, list[int]]:
    series = {name: [0] * len(starts) for name in names}
    for row in rows:
        name = group(row[key])
        if row["i"] is None or not 0 <= row["i"] < len(starts) or name not in series:
            continue
        series[name][row["i"]] += row["n"]
    return {name: values for name, values in series.items() if any(values)}


def _stop_group(stop_reason: str) -> str:
    return stop_reason.split(":", 1)[0]


def bucket_label(moment: datetime, window: TimeWindow) -> str:
    local = timezone.localtime(moment)
    if window.bucket < timedelta(days=1):
        return local.strftime("%H:%M") if window.span <= timedelta(days=1) else local.strftime("%a %H:%M")
    return local.strftime("%b %d")


def dashboard(*, window_key: str, now: datetime | None = None, labels: tuple = ()) -> dict:
    """labels: ((key, value or None), ...) narrows every figure to runs carrying them (runs.labels)."""
    from runs.labels import runs_with_labels

    window = WINDOWS.get(window_key) or WINDOWS[DEFAULT_WINDOW]
    now = now or timezone.now()
    start, end, starts = window_bounds(window, now)

    # Runs an evaluation made are experiments, not operations: leave them out.
    live_runs = runs_with_labels(Run.objects.filter(evaluation__isnull=True), labels)
    created = live_runs.filter(created_at__gte=start, created_at__lte=end)
    outcome_rows = _bucketed(created, "created_at", "status", starts, window)
    finished = live_runs.filter(finished_at__gte=start, finished_at__lte=end, status__in=list(FINISHED_STATUSES))
    stop_rows = _bucketed(finished, "finished_at", "stop_reason", starts, window)

    by_reason: dict[str, int] = {}
    for row in stop_rows:
        by_reason[row["stop_reason"]] = by_reason.get(row["stop_reason"], 0) + row["n"]
    finished_total = sum(by_reason.values())
    stalled = by_reason.get("stalled", 0)
    budget_stops = {reason.split(":", 1)[1]: n for reason, n in by_reason.items()
                    if reason.startswith("budget_exhausted:")}

    attempts = Attempt.objects.filter(started_at__gte=start, started_at__lte=end, run__evaluation__isnull=True)
    if labels:
        attempts = attempts.filter(run__in=live_runs.values("pk"))
    totals = attempts.aggregate(total=Count("id"), repeated=Count("id", filter=Q(repeated_without_progress=True)))
    approvals = approval_stats(start=start, end=end, runs=live_runs if labels else None)

    return {
        "window": window,
        "windows": WINDOWS.values(),
        "start": start,
        "end": end,
        "labels": [bucket_label(s, window) for s in starts],
        "bucket_starts": starts,  # the dashboard's drill-down links filter the runs list to each bucket
        "outcomes": _series_over_time(outcome_rows, "status", starts, OUTCOMES),
        "stop_reasons": _series_over_time(stop_rows, "stop_reason", starts, STOP_GROUPS, _stop_group),
        "runs_created": sum(row["n"] for row in outcome_rows),
        "finished_total": finished_total,
        "stall_rate": stalled / finished_total if finished_total else None,
        "budget_stop_rate": sum(budget_stops.values()) / finished_total if finished_total else None,
        "stalled": stalled,
        "budget_stops": sorted(budget_stops.items(), key=lambda item: (-item[1], item[0])),
        "attempts_total": totals["total"],
        "repeated_attempts": totals["repeated"],
        "repeated_rate": totals["repeated"] / totals["total"] if totals["total"] else None,
        "capabilities": capability_stats(attempts=attempts),
        **approvals,
    }


def capability_stats(*, attempts: QuerySet[Attempt]) -> list[dict]:
    """Calls, error rate and p50/p95 latency per capability. Two queries (one on PostgreSQL)."""
    grouped = attempts.values("capability_name").annotate(
        calls=Count("id"), errors=Count("id", filter=~Q(status="ok")), avg_latency=Avg("latency_s"))
    if connection.vendor == "postgresql":
        grouped = grouped.annotate(p50=PercentileCont("latency_s", 0.5), p95=PercentileCont("latency_s", 0.95))
    rows = list(grouped.order_by("-calls", "capability_name"))
    if connection.vendor != "postgresql":
        found = nearest_rank_percentiles(attempts, "capability_name", "latency_s", (50, 95))
        for row in rows:
            row.update({f"p{p}": value for p, value in found.get(row["capability_name"], {}).items()})
    for row in rows:
        row["error_rate"] = row["errors"] / row["calls"] if row["calls"] else None
    return rows


def nearest_rank_percentiles(queryset: QuerySet, group: str | None, value: str,
                             percents: tuple[int, ...]) -> dict:
    """{group: {p: value}} by nearest rank, returning only the ranked rows from the database.

    The ranking runs as a window query; the outer query keeps the rows whose rank
    is ceil(p/100 * n), so the result is (groups x percents) rows at most.
    """
    partition = [F(group)] if group else []
    inner = queryset.annotate(
        _v=F(value),
        _rn=Window(RowNumber(), partition_by=partition or None, order_by=[F(value).asc(), F("pk").asc()]),
        _n=Window(Count("pk"), partition_by=partition or None),
    ).values(*([group] if group else []), "_v", "_rn", "_n").order_by()
    sql, params = inner.query.sql_with_params()
    picks = " OR ".join(f"_rn = (_n * {int(p)} + 99) / 100" for p in percents)
    group_col = f"{connection.ops.quote_name(group)}, " if group else ""
    wanted = {}
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {group_col}_v, _rn, _n FROM ({sql}) ranked WHERE {picks}", params)
        for row in cursor.fetchall():
            key, v, rn, n = (row[0], *row[1:]) if group else (None, *row)
            for p in percents:
                if rn == (n * p + 99) // 100:
                    wanted.setdefault(key, {})[p] = v
    return wanted


def approval_stats(*, start: datetime, end: datetime, runs: QuerySet | None = None) -> dict:
    """Requests waiting now, and how long decisions took for those decided in the window."""
    approvals = Approval.objects.filter(run__evaluation__isnull=True)
    if runs is not None:
        approvals = approvals.filter(run__in=runs.values("pk"))
    waiting = approvals.filter(state="pending", expires_at__gt=timezone.now()).aggregate(n=Count("id"))["n"]
    # Requests that lapsed undecided in the window (run_finish stamps decided_at when it expires them).
    expired = approvals.filter(state="expired", decided_at__gte=start, decided_at__lte=end).count()
    decided = approvals.filter(state__in=["approved", "rejected"], decided_at__gte=start, decided_at__lte=end)
    wait = ExpressionWrapper(F("decided_at") - F("requested_at"), output_field=DurationField())
    agg = decided.aggregate(n=Count("id"), avg=Avg(wait))
    median = None
    if agg["n"]:
        if connection.vendor == "postgresql":
            median = decided.aggregate(m=PercentileCont(wait, 0.5, output_field=DurationField()))["m"]
        else:
            median = nearest_rank_percentiles(decided.annotate(wait=wait), None, "wait", (50,)).get(None, {}).get(50)
    return {"approvals_waiting": waiting, "approvals_decided": agg["n"], "approvals_expired": expired,
            "decision_avg": _as_timedelta(agg["avg"]), "decision_median": _as_timedelta(median)}


def _as_timedelta(value) -> timedelta | None:
    """SQLite hands raw duration expressions back as microseconds."""
    if value is None or isinstance(value, timedelta):
        return value
    return timedelta(microseconds=float(value))

