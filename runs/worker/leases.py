"""Run leases: which worker may advance a run, fenced by a token raised on every claim.

A worker claims a run with one conditional UPDATE, renews the lease from a
heartbeat thread while it works, and releases it when its slice ends. Every write
a worker makes for a run names (owner, token), so a worker that lost the lease
(it stalled past the lease, and another claimed the run) cannot write anything.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import connection, connections, transaction
from django.db.models import F, Value
from django.db.models.functions import Greatest
from django.utils import timezone

from capabilities.models import Capability
from core.choices import FINISHED_STATUSES
from core.db_sessions import check_session
from core.outages import DATABASE_ERRORS
from runs.models import Attempt, PlannerCall, Run
from runs.worker.sql import Columns, execute, from_row

log = logging.getLogger(__name__)

# Database errors abandon a pass instead of stopping the run: the database is down
# or restarting, nothing was decided, and the next worker resumes from the checkpoint.
INFRASTRUCTURE_ERRORS = DATABASE_ERRORS


@dataclass(frozen=True)
class Lease:
    """A worker's hold on a run: only the holder of the current token may write its passes."""

    run_id: int
    worker: str
    token: int
    # The registry's version when the lease was taken (None where the claim could not read it).
    registry_version: Any = None
    # Whether the run has an attempt or a planner call left in flight by a lost worker (True where the
    # claim could not tell).
    in_flight: bool = True
    # The run row (its owner with it) as the claim found it, on PostgreSQL; None: read it after the claim.
    run: Any = field(default=None, compare=False, repr=False)


def fenced_update(run_id: int, lease: Lease | None, values: dict[str, Any], *, increments: dict[str, int] | None = None,
                  returning: tuple[str, ...] = ()) -> Any:
    """UPDATE the run row only while `lease` is still the current one.

    Without `returning`: the row count (values may be expressions). With it: one
    UPDATE ... RETURNING (PostgreSQL, SQLite 3.35+) of those columns plus the
    registry's version, or None when the lease was lost. One statement either way.
    """
    where = {"pk": run_id}
    if lease is not None:
        where.update(lease_owner=lease.worker, lease_token=lease.token)
    increments = increments or {}
    if not returning:
        return Run.objects.filter(**where).update(**values, **{k: F(k) + n for k, n in increments.items()})
    sql, params = fenced_update_sql(run_id, lease, values, increments)
    cols = ", ".join(connection.ops.quote_name(Run._meta.get_field(c).column) for c in returning)
    with connection.cursor() as cursor:
        if can_return_from_update():
            cursor.execute(f"{sql} RETURNING {cols}, {registry_version_sql()}", params)
            return cursor.fetchone()
        cursor.execute(sql, params)
        if not cursor.rowcount:
            return None
        qn = connection.ops.quote_name
        cursor.execute(f"SELECT {cols}, {registry_version_sql()} FROM {qn(Run._meta.db_table)} "
                       f"WHERE {qn(Run._meta.pk.column)} = %s", [run_id])
        return cursor.fetchone()


def fenced_update_sql(run_id: int, lease: Lease | None, values: dict[str, Any],
                      increments: dict[str, int]) -> tuple[str, list[Any]]:
    """The fenced UPDATE of the run row as SQL and parameters (plain values only, no expressions)."""
    qn, meta, setters = connection.ops.quote_name, Run._meta, Columns.of(Run).sets
    sets, params = [], []
    for name, value in values.items():
        sql, to_param = setters[name]
        sets.append(sql)
        params.append(to_param(value))
    for name, n in increments.items():
        column = qn(meta.get_field(name).column)
        sets.append(f"{column} = {column} + %s")
        params.append(n)
    conditions = [f"{qn(meta.pk.column)} = %s"]
    params.append(run_id)
    if lease is not None:
        conditions += [f"{qn('lease_owner')} = %s", f"{qn('lease_token')} = %s"]
        params += [lease.worker, lease.token]
    return f"UPDATE {qn(meta.db_table)} SET {', '.join(sets)} WHERE {' AND '.join(conditions)}", params


def registry_version_sql() -> str:
    """The registry's version (its latest change), read with every pass's commit."""
    qn = connection.ops.quote_name
    return f"(SELECT MAX({qn('updated_at')}) FROM {qn(Capability._meta.db_table)})"


def withdraw_unsent(lease: Lease | None, run_id: int, rows, what: str) -> None:
    """An intent whose commit failed: its call is never made, yet the intent may be stored all the same
    (the commit went through, its acknowledgement was lost). Its `rows` are deleted while the lease is
    still this worker's, on a fresh connection, so whoever advances the run next does not take a call
    that never happened for one that was made (a write that may have landed, a planner call to count
    at its ceiling). If the database still fails, the intent stays and is taken as made: never sent
    twice, at worst counted or stopped unsure."""
    if lease is None:
        return
    try:
        if not connection.in_atomic_block:
            connection.close()   # the connection whose answer was lost
        with transaction.atomic():
            # The fence every write of the run goes through, as a write that changes nothing: it holds
            # the run row until the delete commits, so no claim can take the run over in between.
            if fenced_update(run_id, lease, {"lease_owner": lease.worker}):
                withdrawn, _ = rows.delete()
                if withdrawn:
                    log.warning("run %s: the intent of %s was stored though its commit failed; it was never "
                                "made, so the intent is withdrawn", run_id, what)
    except DATABASE_ERRORS as exc:
        log.warning("run %s: could not withdraw the intent of %s, never made (%s); it is taken as made",
                    run_id, what, type(exc).__name__)


def registry_version():
    """The registry's version, read on its own (for a reader that holds no lease: the gateway's tool list)."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {registry_version_sql()}")
        return cursor.fetchone()[0]


def can_return_from_update() -> bool:
    if connection.vendor == "postgresql":
        return True
    if connection.vendor == "sqlite":
        import sqlite3

        return sqlite3.sqlite_version_info >= (3, 35)
    return False


def claim(run_id: int, worker: str) -> Lease | None:
    """Take the run's lease with one conditional UPDATE, raising its fencing token.

    None if someone else holds a live lease (or the run has finished). Re-claiming
    one's own live lease is refused too: a redelivered copy of a task must not
    take over from the original while it may still be inside a call.
    """
    now = timezone.now()
    until = now + timedelta(seconds=settings.AGENTOPS_RUN_LEASE_SECONDS)
    to_db = connection.ops.adapt_datetimefield_value
    params = [worker, to_db(until), run_id, to_db(now)]
    if can_return_from_update():
        # One statement: the conditional UPDATE hands the new token back, and says whether a lost
        # worker left a call in flight (a partial index answers), so a slice reads the run's
        # attempts only when there is one to resolve.
        if connection.vendor == "postgresql":  # the run row and its owner too: the slice reads them next
            row = execute(_lease_sql("claim_with_run"), [*params, run_id, run_id])
            return Lease(run_id, worker, row[0], row[1], bool(row[2]), run=_claimed_run(row[3:])) if row else None
        row = execute(_lease_sql("claim_returning"), [*params, run_id, run_id])
        return Lease(run_id, worker, row[0], row[1], bool(row[2])) if row else None
    with connection.cursor() as cursor:
        cursor.execute(_lease_sql("claim"), params)
        if not cursor.rowcount:
            return None
        # The UPDATE above serialises claims; reading the token back is safe as no other claim can succeed.
        cursor.execute(_lease_sql("token"), [run_id, worker])
        row = cursor.fetchone()
    return Lease(run_id, worker, row[0]) if row else None


def _claimed_run(values: tuple) -> Run:
    columns = len(Run._meta.concrete_fields)
    run = from_row(Run, values[:columns])
    run.owner = from_row(Run._meta.get_field("owner").related_model, values[columns:])
    return run


def release(lease: Lease) -> None:
    with connection.cursor() as cursor:
        cursor.execute(_lease_sql("release"), [lease.run_id, lease.worker, lease.token])


_LEASE_SQL: dict[tuple[str, str], str] = {}


def _lease_sql(name: str) -> str:
    """The claim's and release's statements, written once per database vendor: built through the
    ORM they cost ~0.8 ms of CPU per slice, more than their round trips."""
    key = (connection.vendor, name)
    if key not in _LEASE_SQL:
        qn, meta = connection.ops.quote_name, Run._meta
        table, pk = qn(meta.db_table), qn(meta.pk.column)
        owner, token, expires = qn("lease_owner"), qn("lease_token"), qn(meta.get_field("lease_expires_at").column)
        finished = ", ".join(f"'{status.value}'" for status in FINISHED_STATUSES)
        claim_sql = (f"UPDATE {table} SET {owner} = %s, {token} = {token} + 1, {expires} = %s "
                     f"WHERE {pk} = %s AND {qn('status')} NOT IN ({finished}) "
                     f"AND ({expires} IS NULL OR {expires} < %s)")
        attempts, planner_calls = qn(Attempt._meta.db_table), qn(PlannerCall._meta.db_table)
        in_flight = (f"(EXISTS (SELECT 1 FROM {attempts} WHERE {attempts}.{qn('run_id')} = %s "
                     f"AND {attempts}.{qn('in_flight')}) OR EXISTS (SELECT 1 FROM {planner_calls} "
                     f"WHERE {planner_calls}.{qn('run_id')} = %s AND {planner_calls}.{qn('in_flight')}))")
        owner_model = Run._meta.get_field("owner").related_model
        run_columns = [qn(f.column) for f in meta.concrete_fields]
        owner_columns = ", ".join(f"u.{qn(f.column)}" for f in owner_model._meta.concrete_fields)
        with_run = (f"WITH c AS ({claim_sql} RETURNING {', '.join(run_columns)}) "
                    f"SELECT c.{token}, {registry_version_sql()}, {in_flight}, "
                    f"{', '.join(f'c.{column}' for column in run_columns)}, {owner_columns} "
                    f"FROM c JOIN {qn(owner_model._meta.db_table)} u "
                    f"ON u.{qn(owner_model._meta.pk.column)} = c.{qn(meta.get_field('owner').column)}")
        _LEASE_SQL.update({
            (connection.vendor, "claim"): claim_sql,
            (connection.vendor, "claim_returning"): f"{claim_sql} RETURNING {token}, {registry_version_sql()}, {in_flight}",
            (connection.vendor, "claim_with_run"): with_run,
            (connection.vendor, "token"): f"SELECT {token} FROM {table} WHERE {pk} = %s AND {owner} = %s",
            (connection.vendor, "release"): (f"UPDATE {table} SET {owner} = '', {expires} = NULL "
                                             f"WHERE {pk} = %s AND {owner} = %s AND {token} = %s"),
        })
    return _LEASE_SQL[key]


def renew(lease: Lease) -> bool:
    """Extend a live lease (never shortening one sized to a long call); False when it is lost."""
    until = timezone.now() + timedelta(seconds=settings.AGENTOPS_RUN_LEASE_SECONDS)
    return bool(Run.objects.filter(pk=lease.run_id, lease_owner=lease.worker, lease_token=lease.token).update(
        lease_expires_at=Greatest(F("lease_expires_at"), Value(until))))


class LeaseKeeper:
    """Keeps one slice's lease renewed every third of its length while the worker is busy (inside a
    call, say); `lost` turns true once a renewal finds it taken over.

    One thread per worker process renews every slice's lease (`_Renewer`): a thread per slice cost
    each run a thread start and exit, each a hand-off of the GIL that waited behind every busy
    thread when 64 runs start at once, and a database session of its own for each renewal.
    """

    def __init__(self, lease: Lease):
        self.lease = lease
        self.lost = False
        self.due = 0.0   # monotonic time of the next renewal

    def start(self) -> None:
        _RENEWER.hold(self)

    def stop(self) -> None:
        _RENEWER.let_go(self)


class _Renewer:
    """The process's lease-renewal thread, started with the first lease it holds (anew in a forked child,
    which inherits neither the thread nor its parent's leases)."""

    def __init__(self) -> None:
        self._start_afresh()
        os.register_at_fork(after_in_child=self._start_afresh)

    def _start_afresh(self) -> None:
        self._lock = threading.Lock()
        self._woken = threading.Event()   # a lease due sooner than the thread's next wake was held
        self._next_wake = 0.0
        self._held: set[LeaseKeeper] = set()
        self._thread: threading.Thread | None = None

    @staticmethod
    def interval() -> float:
        return max(1.0, settings.AGENTOPS_RUN_LEASE_SECONDS / 3)

    def hold(self, keeper: LeaseKeeper) -> None:
        keeper.due = time.monotonic() + self.interval()
        with self._lock:
            self._held.add(keeper)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="lease-renewer", daemon=True)
                self._thread.start()
            sooner = keeper.due < self._next_wake
        if sooner:  # only then: 64 slices starting at once would otherwise wake it 64 times
            self._woken.set()

    def let_go(self, keeper: LeaseKeeper) -> None:
        with self._lock:
            self._held.discard(keeper)

    def _run(self) -> None:
        while True:
            with self._lock:
                held = list(self._held)
            now = time.monotonic()
            due = [keeper for keeper in held if keeper.due <= now]
            if due:
                check_session()  # as Django does around a request: a broken or too old session
            for keeper in due:
                self._renew(keeper)
            with self._lock:
                idle = not self._held
                next_due = self._next_wake = min((keeper.due for keeper in self._held), default=now + self.interval())
            if idle:
                connections.close_all()  # this thread's session only: nothing to renew for a while
            self._woken.wait(max(0.05, next_due - time.monotonic()))
            self._woken.clear()

    def _renew(self, keeper: LeaseKeeper) -> None:
        try:
            if renew(keeper.lease):
                keeper.due = time.monotonic() + self.interval()
            else:
                keeper.lost = True
                self.let_go(keeper)
        except INFRASTRUCTURE_ERRORS:
            log.warning("could not renew the lease of run %s; retrying", keeper.lease.run_id)
            check_session()
            keeper.due = time.monotonic() + 1.0
        except Exception:  # never let one bad renewal end the renewals of every run in the process
            log.exception("renewing the lease of run %s failed; retrying", keeper.lease.run_id)
            keeper.due = time.monotonic() + 1.0


_RENEWER = _Renewer()
