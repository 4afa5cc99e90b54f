"""Failure groups: failed attempts across runs, grouped by what failed and how.

An attempt's failure fingerprint is (capability, error code, error category, HTTP status, its
message normalized: numbers, ids and UUIDs stripped), hashed. It is computed with the attempt's
row (runs.worker.persistence, both renderings of a pass), so grouping never runs Python over
attempts. Groups are kept like the dashboard's rollup (runs.dashboard.rollup): folded once per
run, in the transaction that finishes it (one grouped INSERT ... ON CONFLICT per table), so the
step loop pays nothing; runs still live are read from the attempt table when a page asks, so
the counts are exact at every moment. Runs an evaluation made are left out (deliberate faults).
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db.models import Count, F, Max, Min, QuerySet
from django.utils import timezone

from core.charts import spark_bars
from core.choices import LIVE_STATUSES
from runs.expressions import EpochDay
from runs.models import Attempt, Run
from runs.models_failures import FailureGroup, FailureGroupDay
from runs.upsert import upsert

DAY_S = 86_400
TREND_DAYS = 14
MESSAGE_CHARS = 300

_UUID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.IGNORECASE)
# Hex or base64-ish tokens with a digit in them, 8+ characters: request ids, hashes, trace ids.
_ID = re.compile(r"\b(?=[A-Za-z_\-]*\d)[0-9A-Za-z_\-]{8,}\b")
_NUMBER = re.compile(r"\d+(?:[.,:]\d+)*")
_SPACE = re.compile(r"\s+")


def normalize_message(message: str) -> str:
    """The message with what differs between occurrences of one failure taken out."""
    text = _UUID.sub("<uuid>", message[:2000])
    text = _ID.sub("<id>", text)
    text = _NUMBER.sub("<n>", text)
    return _SPACE.sub(" ", text).strip()[:MESSAGE_CHARS]


def fingerprint(*, capability: str, error_code: str, error_category: str, http_status: int | None,
                message: str) -> str:
    """The group key of a failed attempt ("" for an ok one: it belongs to no group)."""
    if not error_code:
        return ""
    key = "\x1f".join([capability, error_code, error_category, str(http_status or ""), normalize_message(message)])
    return hashlib.sha256(key.encode()).hexdigest()[:32]


# -- folding finished runs ----------------------------------------------------------------------


def _grouped(attempts: QuerySet[Attempt]) -> QuerySet:
    # Groups are per project: one project's failures never count in, or show on, another's page.
    return (attempts.exclude(fingerprint="").annotate(project_id=F("run__project_id"))
            .values("project_id", "fingerprint").order_by()
            .annotate(capability_name=Min("capability_name"), error_code=Min("error_code"),
                      error_category=Min("error_category"), http_status=Min("http_status"),
                      first_seen=Min("started_at"), last_seen=Max("started_at"), attempts=Count("id"),
                      runs=Count("run_id", distinct=True), sample_attempt_id=Min("id"), first_run_id=Min("run_id")))


def _by_day(attempts: QuerySet[Attempt]) -> QuerySet:
    return (attempts.exclude(fingerprint="")
            .annotate(project_id=F("run__project_id"), day=EpochDay("started_at"))
            .values("project_id", "fingerprint", "day").order_by().annotate(attempts=Count("id")))


def _fold(attempts: QuerySet[Attempt]) -> None:
    upsert(_grouped(attempts), FailureGroup, keys=["project_id", "fingerprint"],
           keep=["capability_name", "error_code", "error_category", "http_status", "sample_attempt_id",
                 "first_run_id"],
           sums=["attempts", "runs"], low=["first_seen"], high=["last_seen"], stamp=timezone.now())
    upsert(_by_day(attempts), FailureGroupDay, keys=["project_id", "fingerprint", "day"], sums=["attempts"])


def record_run_finished(*, run_id: int) -> None:
    """Fold a run that has just finished into the groups. Call once, in the transaction that finishes it."""
    _fold(Attempt.objects.filter(run_id=run_id, run__evaluation__isnull=True))


def rebuild() -> None:
    """Recount every group from the attempts of finished runs (after a bulk load or a restore)."""
    FailureGroupDay.objects.all().delete()
    FailureGroup.objects.all().delete()
    finished = Run.objects.filter(evaluation__isnull=True).exclude(status__in=LIVE_STATUSES)
    _fold(Attempt.objects.filter(run__in=finished.values("pk")))


# -- reading --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GroupFilters:
    capability: str = ""
    error_code: str = ""
    error_category: str = ""
    http_status: int | None = None
    seen_within_days: int | None = None   # last seen in the last N days
    sort: str = "-last_seen"              # -last_seen | -attempts | -runs | -first_seen


GROUP_SORTS = {"-last_seen": ("-last_seen", "-id"), "-attempts": ("-attempts", "-id"), "-runs": ("-runs", "-id"),
               "-first_seen": ("-first_seen", "-id")}


@dataclass
class GroupRow:
    fingerprint: str
    capability_name: str
    error_code: str
    error_category: str
    http_status: int | None
    message: str
    first_seen: datetime
    last_seen: datetime
    attempts: int
    runs: int
    trend: list[int]           # attempts per day, oldest first, TREND_DAYS days ending today
    live_attempts: int = 0     # of `attempts`, in runs still live (not folded yet)
    bars: tuple = ()           # the trend as SVG bars (core.charts.spark_bars)

    @property
    def calls(self) -> str:
        """The group's calls in the explorer."""
        return f"/runs/calls/?fingerprint={self.fingerprint}"
    new: bool = False          # seen only in live runs so far


def _live_groups(filters: GroupFilters) -> dict[str, dict]:
    """Failures of runs still live (not folded yet), grouped: few rows, read by the live-run index."""
    live = Run.objects.filter(evaluation__isnull=True, status__in=list(LIVE_STATUSES)).values("pk")
    rows = _grouped(_filtered_attempts(Attempt.objects.filter(run__in=live), filters))
    return {row["fingerprint"]: row for row in rows}


def _filtered_attempts(attempts: Any, filters: GroupFilters) -> Any:
    """Attempts or groups (the same column names) narrowed by the filters."""
    if filters.capability:
        attempts = attempts.filter(capability_name=filters.capability)
    if filters.error_code:
        attempts = attempts.filter(error_code=filters.error_code)
    if filters.error_category:
        attempts = attempts.filter(error_category=filters.error_category)
    if filters.http_status is not None:
        attempts = attempts.filter(http_status=filters.http_status)
    return attempts


def group_list(*, filters: GroupFilters, limit: int = 50, offset: int = 0) -> tuple[list[GroupRow], bool]:
    """A page of groups (and whether there are more), with live runs' failures added in."""
    now = timezone.now()
    groups: Any = _filtered_attempts(FailureGroup.objects.all(), filters)  # same column names
    if filters.seen_within_days:
        groups = groups.filter(last_seen__gte=now - timedelta(days=filters.seen_within_days))
    order = GROUP_SORTS.get(filters.sort, GROUP_SORTS["-last_seen"])
    stored = list(groups.order_by(*order)[offset:offset + limit + 1])
    more = len(stored) > limit
    stored = stored[:limit]
    live = _live_groups(filters)
    rows = [_row(g.fingerprint, g.capability_name, g.error_code, g.error_category, g.http_status, g.first_seen,
                 g.last_seen, g.attempts, g.runs, g.sample_attempt_id) for g in stored]
    by_fp = {r.fingerprint: r for r in rows}
    known = set(FailureGroup.objects.filter(fingerprint__in=list(live)).values_list("fingerprint", flat=True))
    for fp, row in live.items():
        if fp in by_fp:
            r = by_fp[fp]
            r.attempts += row["attempts"]
            r.runs += row["runs"]
            r.live_attempts = row["attempts"]
            r.first_seen, r.last_seen = min(r.first_seen, row["first_seen"]), max(r.last_seen, row["last_seen"])
        elif fp not in known and offset == 0:   # a group only live runs have hit yet: newest, so first
            rows.insert(0, _row(fp, row["capability_name"], row["error_code"], row["error_category"],
                                row["http_status"], row["first_seen"], row["last_seen"], row["attempts"], row["runs"],
                                row["sample_attempt_id"], live_attempts=row["attempts"], new=True))
    _fill(rows, now)
    return rows, more


def _row(fp, capability, code, category, http_status, first, last, attempts, runs, sample, **extra) -> GroupRow:
    return GroupRow(fingerprint=fp, capability_name=capability, error_code=code, error_category=category,
                    http_status=http_status, message=str(sample), first_seen=first, last_seen=last,
                    attempts=attempts, runs=runs, trend=[], **extra)


def _fill(rows: list[GroupRow], now: datetime) -> None:
    """Each row's message (its sample attempt's, normalized) and daily trend: two queries for the page."""
    samples = dict(Attempt.objects.filter(pk__in=[int(r.message) for r in rows]).values_list("pk", "error_message"))
    today = int(now.timestamp() // DAY_S)
    first_day = today - TREND_DAYS + 1
    days: dict[str, dict[int, int]] = {}
    for fp, day, n in FailureGroupDay.objects.filter(fingerprint__in=[r.fingerprint for r in rows],
                                                     day__gte=first_day).values_list("fingerprint", "day", "attempts"):
        days.setdefault(fp, {})[day] = n
    live = Run.objects.filter(evaluation__isnull=True, status__in=list(LIVE_STATUSES)).values("pk")
    live_days = (Attempt.objects.filter(run__in=live, fingerprint__in=[r.fingerprint for r in rows if r.live_attempts])
                 .annotate(day=EpochDay("started_at"))
                 .values_list("fingerprint", "day").order_by().annotate(n=Count("id")))
    for fp, day, n in live_days:
        days.setdefault(fp, {})[day] = days.get(fp, {}).get(day, 0) + n
    for r in rows:
        r.message = normalize_message(samples.get(int(r.message), ""))
        r.trend = [days.get(r.fingerprint, {}).get(d, 0) for d in range(first_day, today + 1)]
        r.bars = spark_bars(r.trend)


def day_start(day: int) -> datetime:
    return datetime.fromtimestamp(day * DAY_S, tz=UTC)


__all__ = ["FailureGroup", "GroupFilters", "GroupRow", "fingerprint", "group_list", "normalize_message",
           "rebuild", "record_run_finished"]
