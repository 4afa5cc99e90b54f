"""Aggregations for the dashboard: read from the hourly rollup (runs.dashboard.rollup) and live rows.

Each function issues a fixed number of queries and returns at most
(buckets x categories) or (capabilities x latency bins) rows, whatever the
number of runs, attempts and approvals. Latency and decision-time percentiles
come from the rollup's bins (nearest rank, interpolated between a bin's own
minimum and maximum, so exact when a bin holds one value).
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import (
    BigIntegerField,
    Count,
    ExpressionWrapper,
    F,
    Max,
    Min,
    QuerySet,
    Sum,
    Value,
)
from django.utils import timezone

from core.choices import FINISHED_STATUSES, RunStatus
from runs.dashboard import rollup
from runs.expressions import BucketIndex
from runs.labels import runs_with_labels
from runs.models import Approval, ApprovalRollup, Attempt, AttemptRollup, Run, RunRollup, StopRollup
from runs.querytools import one_of
from runtime.stop import StopKind, StopReason


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
LIVE_STATUSES = [s for s in OUTCOMES if s not in FINISHED_STATUSES]
STOP_GROUPS = [k.value for k in StopKind]


def window_bounds(window: TimeWindow, now: datetime) -> tuple[datetime, datetime, list[datetime]]:
    """The window's start and end, and the start of each bucket (aligned to the bucket size)."""
    step = int(window.bucket.total_seconds())
    epoch = int(now.timestamp())
    end_bucket = datetime.fromtimestamp(epoch - epoch % step, tz=now.tzinfo)
    count = int(window.span / window.bucket)
    starts = [end_bucket - window.bucket * (count - 1 - i) for i in range(count)]
    return starts[0], now, starts


def _bucketed(queryset: QuerySet, field: str, category: str, starts: list[datetime], window: TimeWindow) -> QuerySet:
    """Rows {"i": bucket index, category: value, "n": count}, grouped in the database."""
    index = BucketIndex(field, start=starts[0], seconds=window.bucket.total_seconds())
    return queryset.annotate(i=index).values("i", category).annotate(n=Count("id")).order_by()


def _series_over_time(rows, key, starts, names: list[str], group=lambda v: v) -> dict[str, list[int]]:
    series = {name: [0] * len(starts) for name in names}
    for row in rows:
        name = group(row[key])
        if row["i"] is None or not 0 <= row["i"] < len(starts) or name not in series:
            continue
        series[name][row["i"]] += row["n"]
    return {name: values for name, values in series.items() if any(values)}


def _stop_group(stop_reason: str) -> str:
    return StopReason.parse(stop_reason).kind.value


def bucket_label(moment: datetime, window: TimeWindow) -> str:
    local = timezone.localtime(moment)
    if window.bucket < timedelta(days=1):
        return local.strftime("%H:%M") if window.span <= timedelta(days=1) else local.strftime("%a %H:%M")
    return local.strftime("%b %d")


# --- Where each figure is read from ------------------------------------------------------
#
# A window [start, now] is read in two parts: whole hours before `split` (the start of
# the current hour) from the rollup, which holds finished runs and their attempts; and,
# from the run and attempt tables, everything since `split` plus the runs still live
# (and their attempts) before it. The parts are disjoint, so nothing counts twice, and
# both stay small whatever the size of the tables. Windows with buckets under an hour
# (the last hour) read the tables alone.


@dataclass(frozen=True)
class Span:
    start: datetime
    split: datetime
    end: datetime
    bucket_s: int

    @property
    def rollup_hours(self) -> tuple[int, int]:
        return rollup.hour_of(self.start), rollup.hour_of(self.split)

    @property
    def has_rollup(self) -> bool:
        return self.split > self.start

    @property
    def has_tail(self) -> bool:
        """Whether anything is read from the tables after `split` (a period that ends on an hour has nothing)."""
        return self.end > self.split


def span_for(window: TimeWindow, start: datetime, now: datetime, *, narrowed: bool = False) -> Span:
    """How to read the window. The rollup counts all live operations: a dashboard narrowed to
    some runs, or with buckets under an hour, reads the tables alone."""
    bucket_s = int(window.bucket.total_seconds())
    if bucket_s % rollup.HOUR_S or narrowed:
        return Span(start, start, now, bucket_s)
    epoch = int(now.timestamp())
    split = datetime.fromtimestamp(epoch - epoch % rollup.HOUR_S, tz=now.tzinfo)
    return Span(start, max(split, start), now, bucket_s)


def span_between(start: datetime, end: datetime) -> Span:
    """[start, end] read as a window is: whole hours from the rollup when `start` is on an hour (the
    windows of 24 h and more, and the periods before them), the rest from the tables. One bucket."""
    seconds = max(1, int((end - start).total_seconds()))
    if start.timestamp() % rollup.HOUR_S:
        return Span(start, start, end, seconds)
    epoch = int(end.timestamp())
    split = datetime.fromtimestamp(epoch - epoch % rollup.HOUR_S, tz=end.tzinfo)
    return Span(start, max(split, start), end, seconds)


def _rollup_bucket(span: Span):
    """The bucket index of a rollup hour within the window (integer division in the database)."""
    # In 64 bits: hours x 3600 passes 2^31 in 2038.
    seconds = F("hour") * Value(rollup.HOUR_S, output_field=BigIntegerField())
    return ExpressionWrapper((seconds - int(span.start.timestamp())) / span.bucket_s, output_field=BigIntegerField())


def _operations(runs: QuerySet | None) -> QuerySet:
    """Live operations (runs an evaluation made are experiments, left out), or the runs given."""
    return Run.objects.filter(evaluation__isnull=True) if runs is None else runs


def run_counts(*, span: Span, starts: list[datetime], window: TimeWindow,
               runs: QuerySet | None = None) -> tuple[list[dict], list[dict]]:
    """(created rows {i, status, n}, finished rows {i, stop_reason, n}) for the window. Three queries."""
    live_runs = _operations(runs)
    created_rows, finished_rows = [], []
    if span.has_rollup:
        first, last = span.rollup_hours
        for row in (RunRollup.objects.filter(hour__gte=first, hour__lt=last).annotate(i=_rollup_bucket(span))
                    .values("kind", "i", "category").annotate(n=Sum("runs")).order_by()):
            if row["kind"] == RunRollup.CREATED:
                created_rows.append({"i": row["i"], "status": row["category"], "n": row["n"]})
            else:
                finished_rows.append({"i": row["i"], "stop_reason": row["category"], "n": row["n"]})
    parts = []
    if span.has_tail:
        parts.append(live_runs.filter(created_at__gte=span.split, created_at__lte=span.end))
    if span.has_rollup:
        parts.append(live_runs.filter(status__in=LIVE_STATUSES, created_at__gte=span.start, created_at__lt=span.split))
    created_rows += list(_union([_bucketed(part, "created_at", "status", starts, window) for part in parts]))
    if span.has_tail:
        finished = live_runs.filter(finished_at__gte=span.split, finished_at__lte=span.end,
                                    status__in=list(FINISHED_STATUSES))
        finished_rows += list(_bucketed(finished, "finished_at", "stop_reason", starts, window))
    return created_rows, finished_rows


def _union(querysets: list[QuerySet]) -> QuerySet | list:
    """One query for the rows of all (UNION ALL), or nothing to read."""
    if not querysets:
        return []
    return querysets[0].union(*querysets[1:], all=True) if len(querysets) > 1 else querysets[0]


def attempt_stats(*, span: Span, runs: QuerySet | None = None) -> list[dict]:
    """Per capability: calls, errors, repeated, latency avg/p50/p95, merged from rollup bins and live rows.

    Two queries, each returning at most (capabilities x latency bins) rows.
    """
    bins: list[dict] = []
    if span.has_rollup:
        first, last = span.rollup_hours
        bins += list(AttemptRollup.objects.filter(hour__gte=first, hour__lt=last)
                     .values("capability_name", "bin").order_by()
                     .annotate(attempts=Sum("attempts"), errors=Sum("errors"), repeated=Sum("repeated"),
                               latency_sum=Sum("latency_sum"), latency_min=Min("latency_min"),
                               latency_max=Max("latency_max")))
    # A call still in flight (its intent recorded, no outcome yet) has no latency to count.
    if runs is None:
        live = Attempt.objects.filter(run__evaluation__isnull=True, in_flight=False)
    else:
        live = Attempt.objects.filter(one_of(Attempt, "run", runs.values("pk")), in_flight=False)
    parts = []
    if span.has_tail:
        parts.append(rollup.attempt_bins(live.filter(started_at__gte=span.split, started_at__lte=span.end), hour=False))
    if span.has_rollup:
        live_runs = _operations(runs).filter(status__in=LIVE_STATUSES).values("pk")
        # The live runs are live operations already: no join back to the run. Probed run by run
        # on the (run, started_at) index, never a merge over the whole attempt table.
        of_live_runs = Attempt.objects.filter(one_of(Attempt, "run", live_runs), in_flight=False,
                                              started_at__gte=span.start, started_at__lt=span.split)
        parts.append(rollup.attempt_bins(of_live_runs, hour=False))
    bins += list(_union(parts))
    return _capability_rows(bins)


def stop_rows(*, span: Span, runs: QuerySet | None = None) -> list[dict]:
    """Runs finished in the span by (stop reason, capability of the stopping attempt, "" for none): {stop_reason,
    capability_name, runs}. Whole hours from the rollup, the rest from the run table. Two queries."""
    rows: list[dict] = []
    if span.has_rollup:
        first, last = span.rollup_hours
        rows += list(StopRollup.objects.filter(hour__gte=first, hour__lt=last).values("stop_reason", "capability_name")
                     .annotate(runs=Sum("runs")).order_by())
    if span.has_tail:
        recent = _operations(runs).filter(finished_at__gte=span.split, finished_at__lte=span.end,
                                          status__in=list(FINISHED_STATUSES))
        rows += list(rollup.stop_groups(recent, hour=False))
    return rows


def period_figures(*, start: datetime, end: datetime) -> dict:
    """The headline figures of live operations for [start, end], read as a window is (so a trend's earlier
    period costs what the window does, not a scan of its runs and attempts)."""
    span = span_between(start, end)
    created_rows, stop_reason_rows = run_counts(span=span, starts=[start],
                                                window=TimeWindow("period", "", end - start, end - start))
    return headline(created_rows, stop_reason_rows, attempt_stats(span=span))


def headline(created_rows: list[dict], stop_reason_rows: list[dict], capabilities: list[dict]) -> dict:
    """The window's cards from run_counts' rows and attempt_stats' capabilities."""
    by_reason: dict[str, int] = {}
    for row in stop_reason_rows:
        by_reason[row["stop_reason"]] = by_reason.get(row["stop_reason"], 0) + row["n"]
    finished_total = sum(by_reason.values())
    stalled = by_reason.get(StopKind.STALLED, 0)
    budget_stops = {budget.value: n for reason, n in by_reason.items()
                    if (budget := StopReason.parse(reason).budget) is not None}
    attempts_total = sum(c["calls"] for c in capabilities)
    repeated = sum(c["repeated"] for c in capabilities)
    return {
        "runs_created": sum(row["n"] for row in created_rows),
        "finished_total": finished_total,
        "stall_rate": stalled / finished_total if finished_total else None,
        "budget_stop_rate": sum(budget_stops.values()) / finished_total if finished_total else None,
        "stalled": stalled,
        "budget_stops": sorted(budget_stops.items(), key=lambda item: (-item[1], item[0])),
        "attempts_total": attempts_total,
        "repeated_attempts": repeated,
        "repeated_rate": repeated / attempts_total if attempts_total else None,
    }


def _capability_rows(bins: list[dict]) -> list[dict]:
    merged: dict[str, dict[int, list]] = {}
    for row in bins:
        cell = merged.setdefault(row["capability_name"], {}).setdefault(row["bin"], [0, 0, 0, 0.0, None, None])
        cell[0] += row["attempts"]
        cell[1] += row["errors"]
        cell[2] += row["repeated"]
        cell[3] += row["latency_sum"] or 0.0
        cell[4] = row["latency_min"] if cell[4] is None else min(cell[4], row["latency_min"])
        cell[5] = row["latency_max"] if cell[5] is None else max(cell[5], row["latency_max"])
    rows = []
    for name, by_bin in merged.items():
        ordered = [by_bin[b] for b in sorted(by_bin)]
        calls = sum(c[0] for c in ordered)
        rows.append({"capability_name": name, "calls": calls, "errors": sum(c[1] for c in ordered),
                     "repeated": sum(c[2] for c in ordered),
                     "avg_latency": sum(c[3] for c in ordered) / calls if calls else None,
                     "p50": _binned_rank(ordered, calls, 50), "p95": _binned_rank(ordered, calls, 95)})
    for row in rows:
        row["error_rate"] = row["errors"] / row["calls"] if row["calls"] else None
    return sorted(rows, key=lambda r: (-r["calls"], r["capability_name"]))


def _binned_rank(ordered_bins: list[list], total: int, percent: int) -> float | None:
    """The nearest-rank percentile, found in its bin and interpolated between the bin's min and max."""
    if not total:
        return None
    rank = (total * percent + 99) // 100
    seen = 0
    for n, _errors, _repeated, _sum, low, high in ordered_bins:
        if seen + n >= rank:
            return low if n == 1 else low + (high - low) * (rank - seen - 1) / (n - 1)
        seen += n
    return ordered_bins[-1][5]


def dashboard(*, window_key: str, now: datetime | None = None, runs: QuerySet | None = None,
              labels: tuple = ()) -> dict:
    """The dashboard's figures. `runs` narrows every figure to those runs (read from the tables);
    by default they cover every live operation (runs an evaluation made are left out).
    `labels` ((key, value or None), ...) narrows them to the runs carrying those labels."""
    if labels:
        runs = runs_with_labels(_operations(runs), labels)
    window = WINDOWS.get(window_key) or WINDOWS[DEFAULT_WINDOW]
    now = now or timezone.now()
    start, end, starts = window_bounds(window, now)
    span = span_for(window, start, now, narrowed=runs is not None)

    outcome_rows, reason_rows = run_counts(span=span, starts=starts, window=window, runs=runs)
    capabilities = attempt_stats(span=span, runs=runs)
    approvals = approval_stats(start=start, end=end, span=span, runs=runs)

    return {
        "window": window,
        "windows": WINDOWS.values(),
        "start": start,
        "end": end,
        "labels": [bucket_label(s, window) for s in starts],
        "bucket_starts": starts,  # the dashboard's drill-down links filter the runs list to each bucket
        "outcomes": _series_over_time(outcome_rows, "status", starts, OUTCOMES),
        "stop_reasons": _series_over_time(reason_rows, "stop_reason", starts, STOP_GROUPS, _stop_group),
        **headline(outcome_rows, reason_rows, capabilities),
        "capabilities": capabilities,
        **approvals,
    }


def approval_stats(*, start: datetime, end: datetime, span: Span | None = None,
                   runs: QuerySet | None = None) -> dict:
    """Requests waiting now, those that lapsed in the window, and how long decisions took.

    Decisions come from the rollup for the whole hours of `span` and from the table for the rest
    (a decision never changes, so nothing else is live); both as wait bins.
    """
    approvals = Approval.objects.filter(run__evaluation__isnull=True)
    if runs is not None:
        approvals = approvals.filter(run__in=runs.values("pk"))
    waiting = approvals.filter(state="pending", expires_at__gt=timezone.now()).aggregate(n=Count("id"))["n"]
    # Requests that lapsed undecided in the window (run_finish stamps decided_at when it expires them).
    expired = approvals.filter(state="expired", decided_at__gte=start, decided_at__lte=end).count()
    span = span or Span(start, start, end, 0)
    recent = approvals.filter(state__in=rollup.DECIDED, decided_at__gte=span.split, decided_at__lte=end)
    bins = rollup.decision_bins(recent, hour=False)
    if span.has_rollup:  # one query: the rollup's whole hours and the table's recent rows
        first, last = span.rollup_hours
        bins = bins.union(ApprovalRollup.objects.filter(hour__gte=first, hour__lt=last).values("bin").order_by()
                          .annotate(decisions=Sum("decisions"), wait_sum=Sum("wait_sum"), wait_min=Min("wait_min"),
                                    wait_max=Max("wait_max")), all=True)
    merged: dict[int, list] = {}
    for row in bins:
        cell = merged.setdefault(row["bin"], [0, 0, 0, 0.0, None, None])
        cell[0] += row["decisions"]
        cell[3] += row["wait_sum"] or 0.0
        cell[4] = row["wait_min"] if cell[4] is None else min(cell[4], row["wait_min"])
        cell[5] = row["wait_max"] if cell[5] is None else max(cell[5], row["wait_max"])
    ordered = [merged[b] for b in sorted(merged)]
    decided = sum(c[0] for c in ordered)
    median = _binned_rank(ordered, decided, 50)
    return {"approvals_waiting": waiting, "approvals_decided": decided, "approvals_expired": expired,
            "decision_avg": timedelta(seconds=sum(c[3] for c in ordered) / decided) if decided else None,
            "decision_median": timedelta(seconds=median) if median is not None else None}
