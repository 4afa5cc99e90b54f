"""A pass's write, described once (`PassWrite`), and its rendering as one PostgreSQL statement.

PassWriter (runs/worker/persistence.py) describes each pass as a PassWrite and builds its
rows; it renders the common pass (an attempt and its decision, maybe steps whose status
changed, or a run's first plan) with `write_in_one_statement` on PostgreSQL, and any other
pass, on every database, as the ORM's statements in one transaction. Both renderings write
the same rows from the same builders, behind the same fenced UPDATE of the run.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, cast

from django.db import connection, models

from runs.models import Attempt, Decision, PlanRevision, Run, Step
from runs.worker.leases import Lease, fenced_update_sql, registry_version_sql
from runs.worker.sql import execute, insert_from
from runtime import events as ev
from runtime.state import RunState


@dataclass(frozen=True)
class PassWrite:
    """What one pass writes.

    First the run row: `values` set and `increments` added by one UPDATE fenced by the run's id
    and, under `lease`, its owner and token (runs.worker.leases.fenced_update_sql); when it
    matches no row the lease is lost and the pass writes nothing. Then a row for each of
    `events` that adds one, in order (a plan's revision and steps, an attempt, its decision, an
    approval request, a planner call closed), the run's stop, and the steps whose status or
    progress `state` (the checkpoint) changed. What each row holds is built as it is written (the step
    an attempt links, a large output stored by reference), after the fenced UPDATE.
    """

    run_id: int
    lease: Lease | None
    values: dict[str, Any]
    increments: dict[str, int]
    events: tuple[ev.Event, ...]
    stopped: ev.RunStopped | None
    state: RunState
    now: datetime


@dataclass
class StepWrites:
    """The Step rows a pass changes: by new status, the ids of those whose status alone changed; and
    (id, status, progress) of those whose progress changed (progress None: as the plan left it)."""

    statuses: dict[str, list[int]] = field(default_factory=dict)
    progress: list[tuple[int, str, dict[str, Any] | None]] = field(default_factory=list)


def write_in_one_statement(write: PassWrite, *, attempt: dict[str, Any] | None, decision: dict[str, Any] | None,
                           plan: tuple[dict[str, Any], list[dict[str, Any]]] | None,
                           steps: StepWrites) -> tuple[Any, list[tuple]]:
    """The common pass as one statement: the fenced run UPDATE, with the attempt, its decision and the
    steps whose status or progress changed (or a run's first plan: its revision and steps) written only through
    its RETURNING row. One round trip and no BEGIN/COMMIT instead of six.

    Rows are {attname: value}; the decision takes the attempt's new id. Returns the fenced row
    (cancel_requested_at, the registry's version), None when the lease was lost, and the plan's
    steps as written: (id, key, capability_version_id) each."""
    update, params = fenced_update_sql(write.run_id, write.lease, write.values, write.increments)
    qn = connection.ops.quote_name
    cancel = qn(_column(Run, "cancel_requested_at"))
    parts, source = [f"r AS ({update} RETURNING {cancel})"], "r"
    if attempt is not None:
        sql, values_params = insert_from(Attempt, attempt, "r", now=write.now)
        parts.append(f"a AS ({sql} RETURNING id)")
        params += values_params
        source = "a"
    if decision is not None:
        sql, values_params = insert_from(Decision, {**decision, "attempt_id": None}, source, now=write.now,
                                         attempt_id="a.id" if source == "a" else None)
        parts.append(f"d AS ({sql})")
        params += values_params
    plan_steps = False
    if plan is not None:
        revision_row, step_rows = plan
        sql, values_params = insert_from(PlanRevision, revision_row, "r", now=write.now)
        parts.append(f"p AS ({sql} RETURNING id)")
        params += values_params
        if step_rows:
            sql, values_params = insert_from(Step, step_rows, "p", now=write.now, revision_id="p.id")
            parts.append(f"st AS ({sql} RETURNING id, {qn('key')}, {qn('capability_version_id')})")
            params += values_params
            plan_steps = True
    step_table, step_id = qn(Step._meta.db_table), qn(_column(Step))
    for n, (status, pks) in enumerate(steps.statuses.items()):
        parts.append(f"s{n} AS (UPDATE {step_table} SET {qn('status')} = %s "
                     f"WHERE {step_id} IN ({', '.join(['%s'] * len(pks))}) AND EXISTS (SELECT 1 FROM r))")
        params += [status, *pks]
    if steps.progress:
        parts.append(f"sp AS (UPDATE {step_table} SET {qn('status')} = v.status, {qn('progress')} = v.progress "
                     f"FROM (VALUES {', '.join(['(%s, %s, %s::jsonb)'] * len(steps.progress))}) "
                     f"AS v(id, status, progress) WHERE {step_table}.{step_id} = v.id AND EXISTS (SELECT 1 FROM r))")
        for pk, status, progress in steps.progress:
            params += [pk, status, None if progress is None else json.dumps(progress)]
    if plan_steps:  # the fenced row once per step written, with the step's id, key and version
        sql = (f"WITH {', '.join(parts)} SELECT r.{cancel}, {registry_version_sql()}, st.id, "
               f"st.{qn('key')}, st.{qn('capability_version_id')} FROM r CROSS JOIN st")
        rows = execute(sql, params, fetch="all")
        return (rows[0] if rows else None), [(pk, key, version) for *_r, pk, key, version in rows]
    sql = f"WITH {', '.join(parts)} SELECT r.{cancel}, {registry_version_sql()} FROM r"
    return execute(sql, params), []


def _column(model: type[models.Model], name: str = "") -> str:
    """A concrete field's column (the primary key's when no name is given)."""
    field = cast(models.Field, model._meta.get_field(name) if name else model._meta.pk)
    return cast(str, field.column)
