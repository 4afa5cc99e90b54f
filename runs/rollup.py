"""The dashboard's rollup: finished runs and their attempts, counted per hour.

Written once per run, in the transaction that finishes it (runs.services.run_finish):
two counters for the run, and one grouped INSERT ... SELECT over its attempts. Nothing
is added per pass, so the step loop pays nothing for the dashboard. Runs still live,
and the current hour, are read from the run and attempt tables themselves
(runs.dashboard), so the figures are exact at every moment.

Both PostgreSQL and SQLite (3.24+) take `INSERT ... ON CONFLICT DO UPDATE`.
"""
from __future__ import annotations

from datetime import datetime

from django.db import connection, transaction
from django.db.models import Count, F, FloatField, Func, IntegerField, Max, Min, Q, QuerySet, Sum, Value
from django.db.models.functions import Cast, Floor, Greatest, Ln

from runs.choices import FINISHED_STATUSES
from runs.models import Attempt, Run
from runs.models_rollup import AttemptRollup, RunRollup

HOUR_S = 3600
# Latency bins per factor e: 10 makes each bin ~10 % wide (percentiles interpolate within it).
BINS_PER_E = 10
# Latencies below this share the lowest bin (ln(0) is undefined).
MIN_LATENCY_S = 1e-4


class EpochHour(Func):
    """Whole hours since the Unix epoch (UTC) of a timestamp, exactly (no float rounding)."""

    output_field = IntegerField()

    def as_sql(self, compiler, connection, **extra_context):
        sql, params = compiler.compile(self.source_expressions[0])
        return f"CAST(FLOOR(EXTRACT(EPOCH FROM {sql}) / {HOUR_S}) AS INTEGER)", params

    def as_sqlite(self, compiler, connection, **extra_context):
        sql, params = compiler.compile(self.source_expressions[0])
        return f"(CAST(strftime('%%s', {sql}) AS INTEGER) / {HOUR_S})", params


def latency_bin():
    return Cast(Floor(Ln(Greatest(F("latency_s"), Value(MIN_LATENCY_S, output_field=FloatField()))) * BINS_PER_E),
                IntegerField())


def hour_of(moment: datetime) -> int:
    return int(moment.timestamp()) // HOUR_S


def attempt_bins(attempts: QuerySet[Attempt], *, hour: bool) -> QuerySet:
    """Attempts grouped by (hour started,) capability and latency bin, with the rollup's measures.

    The same grouping feeds the rollup and the dashboard's reads of live data, so
    both sides always agree on what a bin is.
    """
    keys = {"bin": latency_bin()}
    if hour:
        keys = {"hour": EpochHour("started_at"), **keys}
    return (attempts.annotate(**keys).values(*keys, "capability_name").order_by()
            .annotate(attempts=Count("id"), errors=Count("id", filter=~Q(status="ok")),
                      repeated=Count("id", filter=Q(repeated_without_progress=True)),
                      latency_sum=Sum("latency_s"), latency_min=Min("latency_s"), latency_max=Max("latency_s")))


_ATTEMPT_COLUMNS = ["hour", "capability_name", "bin", "attempts", "errors", "repeated", "latency_sum", "latency_min",
                    "latency_max"]


def _fold_attempts(attempts: QuerySet[Attempt]) -> None:
    """Add these attempts to the rollup: one INSERT ... SELECT ... ON CONFLICT."""
    grouped = attempt_bins(attempts, hour=True).values_list(*_ATTEMPT_COLUMNS)
    sql, params = grouped.query.sql_with_params()
    table = connection.ops.quote_name(AttemptRollup._meta.db_table)
    cols = ", ".join(connection.ops.quote_name(c) for c in _ATTEMPT_COLUMNS)
    least, greatest = ("LEAST", "GREATEST") if connection.vendor == "postgresql" else ("MIN", "MAX")
    updates = ", ".join([f"{c} = {table}.{c} + EXCLUDED.{c}" for c in ("attempts", "errors", "repeated", "latency_sum")]
                        + [f"latency_min = {least}({table}.latency_min, EXCLUDED.latency_min)",
                           f"latency_max = {greatest}({table}.latency_max, EXCLUDED.latency_max)"])
    # "WHERE true": SQLite needs it to parse ON CONFLICT after INSERT ... SELECT. ORDER BY the key:
    # runs finishing at once then lock shared rows in one order, so they queue instead of deadlocking.
    with connection.cursor() as cursor:
        cursor.execute(f"INSERT INTO {table} ({cols}) SELECT {cols} FROM ({sql}) AS grouped WHERE true "
                       f"ORDER BY hour, capability_name, bin "
                       f"ON CONFLICT (hour, capability_name, bin) DO UPDATE SET {updates}", params)


def _add_runs(rows: list[tuple[str, int, str, int]]) -> None:
    if not rows:
        return
    table = connection.ops.quote_name(RunRollup._meta.db_table)
    rows = sorted(rows)  # one lock order for every transaction (see _fold_attempts)
    values = ", ".join(["(%s, %s, %s, %s)"] * len(rows))
    with connection.cursor() as cursor:
        cursor.execute(f"INSERT INTO {table} (kind, hour, category, runs) VALUES {values} "
                       f"ON CONFLICT (kind, hour, category) DO UPDATE SET runs = {table}.runs + EXCLUDED.runs",
                       [v for row in rows for v in row])


def record_run_finished(run: Run) -> None:
    """Count a run that has just finished, with its attempts. Call in the transaction that finishes it."""
    if run.evaluation_id is not None or run.status not in FINISHED_STATUSES or run.finished_at is None:
        return
    _add_runs([(RunRollup.CREATED, hour_of(run.created_at), run.status, 1),
               (RunRollup.FINISHED, hour_of(run.finished_at), run.stop_reason, 1)])
    _fold_attempts(Attempt.objects.filter(run_id=run.pk))


def record_attempts(attempts: QuerySet[Attempt]) -> None:
    """Add attempts recorded after their run finished (data loaded by hand, tests' factories)."""
    _fold_attempts(attempts.filter(run__evaluation__isnull=True, run__status__in=list(FINISHED_STATUSES)))


@transaction.atomic
def rebuild() -> None:
    """Recount everything from the run and attempt tables (after a bulk load or a restore)."""
    RunRollup.objects.all().delete()
    AttemptRollup.objects.all().delete()
    finished = Run.objects.filter(evaluation__isnull=True, status__in=list(FINISHED_STATUSES),
                                  finished_at__isnull=False)
    rows = [(RunRollup.CREATED, r["hour"], r["status"], r["n"]) for r in
            finished.annotate(hour=EpochHour("created_at")).values("hour", "status").annotate(n=Count("id")).order_by()]
    rows += [(RunRollup.FINISHED, r["hour"], r["stop_reason"], r["n"]) for r in
             finished.annotate(hour=EpochHour("finished_at")).values("hour", "stop_reason").annotate(n=Count("id"))
             .order_by()]
    for i in range(0, len(rows), 500):
        _add_runs(rows[i:i + 500])
    _fold_attempts(Attempt.objects.filter(run__in=finished.values("pk")))
