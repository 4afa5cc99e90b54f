"""The dashboard's rollup: finished runs and their attempts, counted per hour.

Written once per run, in the transaction that finishes it (runs.services.run_finish):
two counters for the run, its stop by capability, and one grouped INSERT ... SELECT over
its attempts; and once
per approval decision, in the transaction that records it (runs.services.approval_decide). Nothing
is added per pass, so the step loop pays nothing for the dashboard. Runs still live,
and the current hour, are read from the run and attempt tables themselves
(runs.dashboard.periods), so the figures are exact at every moment.

Both PostgreSQL and SQLite (3.24+) take `INSERT ... ON CONFLICT DO UPDATE`.
"""
from __future__ import annotations

from datetime import datetime

from django.db import connection, transaction
from django.db.models import Count, F, FloatField, IntegerField, Max, Min, Q, QuerySet, Sum, Value
from django.db.models.functions import Cast, Coalesce, Floor, Greatest, Ln

from core.choices import FINISHED_STATUSES
from core.projects import project_scope
from runs.expressions import HOUR_S, EpochHour, SecondsBetween
from runs.models import Approval, Attempt, Run
from runs.models_rollup import ApprovalRollup, AttemptRollup, RunRollup, StopRollup
from runs.upsert import upsert, upsert_sql

# Latency bins per factor e: 10 makes each bin ~10 % wide (percentiles interpolate within it).
BINS_PER_E = 10
# Latencies below this share the lowest bin (ln(0) is undefined).
MIN_LATENCY_S = 1e-4


def log_bin(expression):
    """The bin of a positive duration in seconds: floor(ln(seconds) * BINS_PER_E)."""
    return Cast(Floor(Ln(Greatest(expression, Value(MIN_LATENCY_S, output_field=FloatField()))) * BINS_PER_E),
                IntegerField())


def latency_bin():
    return log_bin(F("latency_s"))


def hour_of(moment: datetime) -> int:
    return int(moment.timestamp()) // HOUR_S


def attempt_bins(attempts: QuerySet[Attempt], *, hour: bool) -> QuerySet:
    """Attempts grouped by (hour started,) capability and latency bin, with the rollup's measures.

    The same grouping feeds the rollup and the dashboard's reads of live data, so
    both sides always agree on what a bin is.
    """
    keys = {"bin": latency_bin()}
    if hour:
        # The rollup's rows are per project (a dashboard counts its own project's runs only).
        keys = {"project_id": F("run__project_id"), "hour": EpochHour("started_at"), **keys}
    return (attempts.annotate(**keys).values(*keys, "capability_name").order_by()
            .annotate(attempts=Count("id"), errors=Count("id", filter=~Q(status="ok")),
                      repeated=Count("id", filter=Q(repeated_without_progress=True)),
                      latency_sum=Sum("latency_s"), latency_min=Min("latency_s"), latency_max=Max("latency_s")))


def decision_bins(approvals: QuerySet, *, hour: bool) -> QuerySet:
    """Decided approvals grouped by (hour decided,) bin of the wait, with the rollup's measures."""
    wait = SecondsBetween("requested_at", "decided_at")
    keys = {"bin": log_bin(wait)}
    if hour:
        keys = {"project_id": F("run__project_id"), "hour": EpochHour("decided_at"), **keys}
    return (approvals.annotate(wait=wait, **keys).values(*keys).order_by()
            .annotate(decisions=Count("id"), wait_sum=Sum("wait"), wait_min=Min("wait"), wait_max=Max("wait")))


def _fold(grouped: QuerySet, model, *, keys: list[str], sums: list[str], low: str = "", high: str = "") -> None:
    """Add grouped rows to a rollup table (runs.upsert)."""
    upsert(grouped, model, **_fold_options(keys=keys, sums=sums, low=low, high=high))


def _fold_options(*, keys: list[str], sums: list[str], low: str = "", high: str = "") -> dict:
    return dict(keys=keys, sums=sums, low=[low] if low else [], high=[high] if high else [])


def _fold_attempts(attempts: QuerySet[Attempt]) -> None:
    (grouped, model), options = _attempt_fold(attempts)
    _fold(grouped, model, **options)


def _attempt_fold(attempts: QuerySet[Attempt]) -> tuple:
    return (attempt_bins(attempts, hour=True), AttemptRollup), dict(
        keys=["project_id", "hour", "capability_name", "bin"], sums=["attempts", "errors", "repeated", "latency_sum"],
        low="latency_min", high="latency_max")


def _fold_decisions(approvals: QuerySet) -> None:
    _fold(decision_bins(approvals, hour=True), ApprovalRollup, keys=["project_id", "hour", "bin"],
          sums=["decisions", "wait_sum"],
          low="wait_min", high="wait_max")


DECIDED = ["approved", "rejected"]


def record_decision(approval_id: int) -> None:
    """Count an approval just approved or rejected. Call in the transaction that decides it."""
    _fold_decisions(Approval.objects.filter(pk=approval_id, state__in=DECIDED, run__evaluation__isnull=True))


def _run_counts(runs: QuerySet[Run]) -> QuerySet:
    """Finished runs as rollup rows: (created, hour created, status) and (finished, hour finished, stop reason)."""
    finished = runs.filter(evaluation__isnull=True, status__in=list(FINISHED_STATUSES), finished_at__isnull=False)

    def rows(kind: str, moment: str, category: str) -> QuerySet:
        return (finished.annotate(kind=Value(kind), hour=EpochHour(moment), category=F(category))
                .values("project_id", "kind", "hour", "category").order_by().annotate(runs=Count("id")))

    return rows(RunRollup.CREATED, "created_at", "status").union(rows(RunRollup.FINISHED, "finished_at", "stop_reason"),
                                                                 all=True)


def stop_groups(runs: QuerySet[Run], *, hour: bool) -> QuerySet:
    """Runs grouped by (hour finished,) stop reason and the stopping attempt's capability ("" for none),
    counted as `runs`. The same grouping feeds the rollup and the dashboard's reads of recent runs."""
    keys = {"hour": EpochHour("finished_at")} if hour else {}
    project = ["project_id"] if hour else []
    return (runs.annotate(**keys, capability_name=Coalesce(F("stop_attempt__capability_name"), Value("")))
            .values(*project, *keys, "stop_reason", "capability_name").order_by().annotate(runs=Count("id")))


def _stop_counts(runs: QuerySet[Run]) -> QuerySet:
    """Finished runs as StopRollup rows."""
    return stop_groups(runs.filter(evaluation__isnull=True, status__in=list(FINISHED_STATUSES),
                                   finished_at__isnull=False), hour=True)


STOP_KEYS = ["project_id", "hour", "stop_reason", "capability_name"]
RUN_KEYS = ["project_id", "kind", "hour", "category"]


def record_run_finished(*, run_id: int) -> None:
    """Count a run that has just finished, with its attempts: three statements, read from the run's
    row as it now stands (its stop attempt set). Call in the transaction that finishes it, once."""
    with connection.cursor() as cursor:
        for sql, params, run_id_at in _run_finished_statements():
            cursor.execute(sql, [run_id if n in run_id_at else p for n, p in enumerate(params)])


# A run id no run has: compiled into the statements once, then replaced by each finishing run's id.
_NO_RUN = -7_358_201_947
_FINISHED_STATEMENTS: dict[str, list[tuple[str, tuple, frozenset[int]]]] = {}


def _run_finished_statements() -> list[tuple[str, tuple, frozenset[int]]]:
    """record_run_finished's statements, compiled once per database vendor: building the grouped
    queries through the ORM cost more CPU than the rest of a short run's finish."""
    if connection.vendor not in _FINISHED_STATEMENTS:
        with project_scope(None):   # compiled once for every run: no project's filter in them
            _FINISHED_STATEMENTS[connection.vendor] = _compile_finished_statements()
    return _FINISHED_STATEMENTS[connection.vendor]


def _compile_finished_statements() -> list[tuple[str, tuple, frozenset[int]]]:
    (grouped, model), options = _attempt_fold(Attempt.objects.filter(run_id=_NO_RUN, run__evaluation__isnull=True))
    statements = [
        upsert_sql(_run_counts(Run.objects.filter(pk=_NO_RUN)), RunRollup, keys=RUN_KEYS, sums=["runs"]),
        upsert_sql(_stop_counts(Run.objects.filter(pk=_NO_RUN)), StopRollup, keys=STOP_KEYS, sums=["runs"]),
        upsert_sql(grouped, model, **_fold_options(**options))]
    return [(sql, tuple(params), frozenset(n for n, p in enumerate(params) if p == _NO_RUN)) for sql, params in statements]


def record_attempts(attempts: QuerySet[Attempt]) -> None:
    """Add attempts recorded after their run finished (data loaded by hand, tests' factories)."""
    _fold_attempts(attempts.filter(run__evaluation__isnull=True, run__status__in=list(FINISHED_STATUSES)))


@transaction.atomic
def rebuild() -> None:
    """Recount everything from the run and attempt tables (after a bulk load or a restore)."""
    RunRollup.objects.all().delete()
    AttemptRollup.objects.all().delete()
    ApprovalRollup.objects.all().delete()
    finished = Run.objects.filter(evaluation__isnull=True, status__in=list(FINISHED_STATUSES),
                                  finished_at__isnull=False)
    _fold(_run_counts(Run.objects.all()), RunRollup, keys=RUN_KEYS, sums=["runs"])
    rebuild_stops()
    _fold_attempts(Attempt.objects.filter(run__in=finished.values("pk")))
    _fold_decisions(Approval.objects.filter(state__in=DECIDED, run__evaluation__isnull=True))


def rebuild_stops() -> None:
    """Recount the stops per capability alone (rebuild() does it too; the migration adding them calls it)."""
    StopRollup.objects.all().delete()
    _fold(_stop_counts(Run.objects.all()), StopRollup, keys=STOP_KEYS, sums=["runs"])
