"""The attempts table partitioned by month on PostgreSQL (migration runs.0032); SQLite keeps one table.

Attempts are the one table that grows with every call (20M rows at 1M runs). Partitioned by
`started_at`, a month's attempts are one table: retention drops it whole instead of deleting its
rows one by one (runs.retention), and a query bounded in time reads only the months it names.

- One partition per calendar month (UTC), `runs_attempt_pYYYY_MM`, created ahead by the scheduler
  (`runs.ensure_attempt_partitions`, AGENTOPS_ATTEMPT_PARTITIONS_AHEAD months) and by the migration.
- A default partition, `runs_attempt_default`, takes whatever no month holds yet (a scheduler that
  was down for months, a clock far off): an insert never fails for want of a partition. Creating a
  month moves the default partition's rows of that month into it, in the same transaction.
- A month can be dropped when it ended before the retention cutoff and none of its attempts belongs
  to a run that retention keeps (a live run, or one that finished after the cutoff).

What partitioning costs, and why it is safe (docs/scaling.md, "Attempts partitioned by month"):
PostgreSQL enforces a unique constraint only with the partition key in it, so the primary key is
(id, started_at), the uid and (step, number) constraints include started_at, and no table can
declare a foreign key to attempts (the six that pointed at one keep the id, without the constraint:
Django's on_delete still applies, and dropping a month applies it here). Every attempt id still
comes from one sequence; what keeps a second writer from recording an attempt twice is the run's
lease fence (shared/design.md), not these constraints.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import connection, models, transaction
from django.db.models.expressions import RawSQL
from django.db.models.fields.reverse_related import ForeignObjectRel
from django.utils import timezone

from core.choices import FINISHED_STATUSES
from runs.models import Attempt

PARENT = "runs_attempt"
DEFAULT = "runs_attempt_default"
# One scheduler at a time creates or drops months (pg_advisory_xact_lock's key: "attempt partitions").
LOCK_KEY = 0x61747470
# Creating or dropping a month takes a brief exclusive lock on the parent: give up rather than queue
# every insert behind a long-running query; the next tick tries again.
LOCK_TIMEOUT = "5s"
# An attempt starts after its run was created; this covers clocks that disagree (web vs worker).
CLOCK_MARGIN = timedelta(days=1)
_BOUND = re.compile(r"FOR VALUES FROM \('([^']+)'\) TO \('([^']+)'\)")


@dataclass(frozen=True)
class Partition:
    name: str
    start: datetime | None   # None: the default partition
    end: datetime | None

    @property
    def is_default(self) -> bool:
        return self.start is None


def month_start(moment: datetime) -> datetime:
    moment = moment.astimezone(UTC)
    return datetime(moment.year, moment.month, 1, tzinfo=UTC)


def next_month(start: datetime) -> datetime:
    return datetime(start.year + start.month // 12, start.month % 12 + 1, 1, tzinfo=UTC)


def partition_name(start: datetime) -> str:
    return f"{PARENT}_p{start:%Y_%m}"


def is_partitioned() -> bool:
    if connection.vendor != "postgresql":
        return False
    with connection.cursor() as cursor:
        cursor.execute("SELECT relkind FROM pg_class WHERE oid = to_regclass(%s)", [PARENT])
        row = cursor.fetchone()
    return bool(row) and row[0] == "p"


def partitions() -> list[Partition]:
    """The attempts table's partitions, months in order, then the default one."""
    if not is_partitioned():
        return []
    with connection.cursor() as cursor:
        cursor.execute("SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i "
                       "JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = to_regclass(%s)", [PARENT])
        rows = cursor.fetchall()
    found = []
    for name, bound in rows:
        match = _BOUND.search(bound)
        if match:
            found.append(Partition(name, _timestamp(match[1]), _timestamp(match[2])))
        else:
            found.append(Partition(name, None, None))
    return sorted(found, key=lambda p: (p.is_default, p.start or datetime.min.replace(tzinfo=UTC)))


def _timestamp(text: str) -> datetime:
    # PostgreSQL writes a bound as '2026-12-01 00:00:00+00' (in the session's time zone: UTC here).
    return datetime.fromisoformat(text).astimezone(UTC)


def ensure(*, now: datetime, ahead: int) -> list[str]:
    """Create the months from `now`'s through `ahead` months after it that do not exist yet, and those
    of any row the default partition holds (moving it there); returns the names created. Safe to call
    from several processes (one at a time does the work)."""
    if not is_partitioned():
        return []
    months = [month_start(now)]
    for _ in range(ahead):
        months.append(next_month(months[-1]))
    with connection.cursor() as cursor:   # the default partition is empty unless a tick was missed
        cursor.execute(f"SELECT DISTINCT date_trunc('month', started_at, 'UTC') FROM \"{DEFAULT}\"")
        # (December 9999 has no month after it to bound it: such a row stays where it is.)
        stray = {month_start(start) for (start,) in cursor.fetchall() if start.year < 9999}
    months = sorted(set(months) | stray)
    return create_months(months)


def ensure_by_setting() -> list[str]:
    """The scheduler's tick: AGENTOPS_ATTEMPT_PARTITIONS_AHEAD months ahead of today."""
    return ensure(now=timezone.now(), ahead=settings.AGENTOPS_ATTEMPT_PARTITIONS_AHEAD)


def create_months(months: list[datetime]) -> list[str]:
    created = []
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [LOCK_KEY])
        cursor.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
        existing = {p.start for p in partitions() if not p.is_default}
        for start in months:
            if start not in existing:
                _create_month(cursor, start)
                created.append(partition_name(start))
    return created


def _create_month(cursor, start: datetime) -> None:
    end = next_month(start)
    name = partition_name(start)
    cursor.execute(f'SELECT 1 FROM "{DEFAULT}" WHERE started_at >= %s AND started_at < %s LIMIT 1', [start, end])
    if cursor.fetchone() is None:
        cursor.execute(f'CREATE TABLE "{name}" PARTITION OF "{PARENT}" FOR VALUES FROM (%s) TO (%s)', [start, end])
        return
    # PostgreSQL refuses a new partition while the default one holds rows of its range: move them
    # through a temporary table (ids, and everything else, kept; the generated column recomputed).
    columns = ", ".join(f'"{c}"' for c in stored_columns(cursor))
    cursor.execute(f'LOCK TABLE "{DEFAULT}" IN ACCESS EXCLUSIVE MODE')
    cursor.execute(f'CREATE TEMPORARY TABLE attempts_moving ON COMMIT DROP AS SELECT {columns} FROM "{DEFAULT}" '
                   "WHERE started_at >= %s AND started_at < %s", [start, end])
    cursor.execute(f'DELETE FROM "{DEFAULT}" WHERE started_at >= %s AND started_at < %s', [start, end])
    cursor.execute(f'CREATE TABLE "{name}" PARTITION OF "{PARENT}" FOR VALUES FROM (%s) TO (%s)', [start, end])
    cursor.execute(f'INSERT INTO "{PARENT}" ({columns}) SELECT {columns} FROM attempts_moving')
    cursor.execute("DROP TABLE attempts_moving")


def stored_columns(cursor, table: str = PARENT) -> list[str]:
    """The table's columns an INSERT may name (a generated column may not be written)."""
    cursor.execute("SELECT attname FROM pg_attribute WHERE attrelid = to_regclass(%s) AND attnum > 0 "
                   "AND NOT attisdropped AND attgenerated = '' ORDER BY attnum", [table])
    return [name for (name,) in cursor.fetchall()]


# --- Retention ---------------------------------------------------------------------------------

def droppable(cutoff: datetime) -> list[Partition]:
    """Months that ended before the cutoff whose attempts all belong to runs retention deletes
    (finished before the cutoff). A month with one attempt of a kept run stays whole; its other
    runs' attempts go row by row with their runs."""
    if not is_partitioned():
        return []
    return [p for p in partitions()
            if not p.is_default and p.end is not None and p.end <= cutoff and not _holds_kept_runs(p, cutoff)]


def _holds_kept_runs(partition: Partition, cutoff: datetime) -> bool:
    # Kept runs are few (live ones, and those finished since the cutoff) and indexed by status and
    # finish time: ask each one made before the month ended whether it has an attempt in it.
    assert partition.end is not None
    with connection.cursor() as cursor:
        cursor.execute(
            f'SELECT EXISTS (SELECT 1 FROM runs_run r WHERE r.created_at < %s '
            f'AND NOT (r.status = ANY(%s) AND r.finished_at < %s) '
            f'AND EXISTS (SELECT 1 FROM "{partition.name}" a WHERE a.run_id = r.id))',
            [partition.end + CLOCK_MARGIN, [str(status) for status in FINISHED_STATUSES], cutoff])
        return cursor.fetchone()[0]


def count_rows(partition: Partition) -> int:
    with connection.cursor() as cursor:
        cursor.execute(f'SELECT count(*) FROM "{partition.name}"')
        return cursor.fetchone()[0]


def estimate(partition: Partition) -> tuple[int, int]:
    """Rows (the planner's estimate: exact after VACUUM or ANALYZE) and bytes on disk, indexes included."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT greatest(reltuples, 0)::bigint, pg_total_relation_size(oid) FROM pg_class "
                       "WHERE oid = to_regclass(%s)", [partition.name])
        rows, size = cursor.fetchone()
    return rows, size


def lock_timed_out(error: Exception) -> bool:
    """Did a statement give up waiting for a lock (LOCK_TIMEOUT: lock_not_available)?"""
    return getattr(error.__cause__, "sqlstate", None) == "55P03"


def output_refs(partition: Partition) -> set[int]:
    with connection.cursor() as cursor:
        cursor.execute(f'SELECT DISTINCT output_ref_id FROM "{partition.name}" WHERE output_ref_id IS NOT NULL')
        return {ref for (ref,) in cursor.fetchall()}


def drop(partition: Partition, cutoff: datetime) -> int | None:
    """Drop one month: first what refers to its attempts, by each relation's on_delete (a decision or a
    score goes; a run's stop attempt or a revision's trigger is cleared), then the table. Returns the
    attempts it held, or None if it no longer may go (checked again under its lock). Call inside the
    transaction that also deletes the stored outputs they alone used."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [LOCK_KEY])
        cursor.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
        cursor.execute(f'LOCK TABLE "{partition.name}" IN SHARE MODE')   # no new rows while it is checked
    if _holds_kept_runs(partition, cutoff):
        return None
    attempts = count_rows(partition)
    ids = RawSQL(f'SELECT id FROM "{partition.name}"', [])
    for relation in Attempt._meta.get_fields(include_hidden=True):
        if not isinstance(relation, ForeignObjectRel) or relation.many_to_many:
            continue
        model = relation.related_model
        assert model is not None and not isinstance(model, str)
        rows = model._base_manager.filter(**{f"{relation.field.attname}__in": ids})
        if relation.on_delete is models.CASCADE:
            rows.delete()
        elif relation.on_delete is models.SET_NULL:
            rows.update(**{relation.field.attname: None})
        else:   # PROTECT, RESTRICT or DO_NOTHING: no month may be dropped under such a relation
            raise RuntimeError(f"{model.__name__}.{relation.field.name} does not say what "
                               f"happens when its attempt is deleted")
    with connection.cursor() as cursor:
        # Deferred foreign-key checks still pending in this transaction would refuse the DROP: run them now.
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        cursor.execute(f'ALTER TABLE "{PARENT}" DETACH PARTITION "{partition.name}"')
        cursor.execute(f'DROP TABLE "{partition.name}"')
    return attempts
