"""The run's waterfall: its rows read in one query, drawn by the pure renderer (runs.trace.timeline_svg).

One query whatever the run's size (revisions and approvals come from the page), and the
markup stays bounded: bars narrower than a pixel, or landing on a pixel another bar of the
lane already took, are merged into one column (MERGE_PX wide) that counts what it holds.

Up to AGGREGATE_ABOVE attempts the query reads every attempt and the renderer merges them.
Above it the database groups the attempts into those same columns (per capability; the
renderer folds the lanes past MAX_CAPABILITY_LANES) with their counts of attempts,
failures and repeats, and returns a row per column plus, for each, its first attempt
(its link and the "first:" of its title); the notable attempts (the stop trigger's
and the first repeats, with the earlier attempt each repeats) come back as rows of
their own and are drawn as bars over the columns, named and linked. Waits are
counted in the column of the retry or poll that ends them, titled by the first one.
So the work is bounded by pixels, not attempts.
"""
from __future__ import annotations

from dataclasses import fields
from datetime import datetime
from typing import Any

from django.db import connections, router
from django.db.models import (
    BooleanField,
    Case,
    CharField,
    Count,
    F,
    FloatField,
    IntegerField,
    Min,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Sum,
    Value,
    When,
)
from django.db.models.expressions import RawSQL
from django.db.models.functions import Cast, Coalesce, Concat, Floor, Greatest, Least
from django.utils import timezone
from django.utils.safestring import SafeString, mark_safe

from runs.expressions import EpochSeconds
from runs.models import Approval, Attempt, PlanRevision, Run, Step
from runs.trace import timeline_svg as svg
from runs.trace.review import StopTrigger
from runs.trace.timeline_svg import (
    ApprovalRow,
    AttemptRow,
    ColumnAttempt,
    ColumnRow,
    MergedAttempts,
    RevisionRow,
    RunFrame,
    TriggeringAttempt,
)

# Up to this many attempts every one is read and drawn; above it the database merges them into columns.
AGGREGATE_ABOVE = 2000


def run_timeline(*, run: Run, revisions: list[PlanRevision], approvals: list[Approval],
                 trigger: StopTrigger | None, now: datetime | None = None) -> SafeString | None:
    """The run's timeline as SVG markup (None when there is nothing to draw yet)."""
    frame = run_frame(run=run, trigger=trigger, now=now)
    revision_rows, approval_rows = revision_rows_of(revisions), approval_rows_of(approvals)
    # One query whatever the run's size: every attempt up to AGGREGATE_ABOVE, else a row per merged column.
    attempts = attempt_rows(run=run, stop_uid=frame.stop_uid,
                            floor_s=min([frame.origin] + [rev.created for rev in revision_rows[:1]]), end_s=frame.end)
    if isinstance(attempts, MergedAttempts):
        return mark_safe(svg.render_merged(frame, attempts, revision_rows, approval_rows))
    rendered = svg.render_attempts(frame, attempts, revision_rows, approval_rows)
    return None if rendered is None else mark_safe(rendered)


def run_frame(*, run: Run, trigger: StopTrigger | None, now: datetime | None = None) -> RunFrame:
    stop_by = trigger.kind if trigger and trigger.kind in ("attempt", "completion") else ""
    return RunFrame(run_id=run.pk, stop_reason=run.stop_reason,
                    origin=(run.started_at or run.created_at).timestamp(),
                    end=(run.finished_at or now or timezone.now()).timestamp(), finished=bool(run.finished_at),
                    stop_uid=trigger.attempt_uid if trigger and stop_by else "", stop_kind=stop_by)


def revision_rows_of(revisions: list[PlanRevision]) -> list[RevisionRow]:
    """The page's revisions (their triggering attempts joined) as the renderer's rows: no query."""
    rows = []
    for revision in revisions:
        t = revision.triggering_attempt if revision.triggering_attempt_id else None
        rows.append(RevisionRow(
            number=revision.number, reason_code=revision.reason_code, accepted=revision.accepted,
            created=revision.created_at.timestamp(),
            trigger=None if t is None else TriggeringAttempt(
                uid=t.uid, capability=t.capability_name, number=t.number, status=t.status, error_code=t.error_code,
                ended=t.ended_at.timestamp())))
    return rows


def approval_rows_of(approvals: list[Approval]) -> list[ApprovalRow]:
    """The page's approvals (their steps joined) as the renderer's rows: no query."""
    return [ApprovalRow(kind=a.kind, step_key=a.step.key if a.step is not None else None, state=a.state,
                        requested=a.requested_at.timestamp(),
                        decided=a.decided_at.timestamp() if a.decided_at else None)
            for a in approvals]


# The columns of the one query's rows: the first 13 are every attempt's (AttemptRow's), "part" says
# which of the three parts a row is from (_EXACT, _GROUP, _DETAIL).
_FIELDS = ("auid", "t0", "t1", "akind", "astatus", "code", "cap", "repeated", "astep", "key", "rev", "num", "sig",
           "part", "aid", "col", "n", "failed_n", "repeated_n", "first_id", "is_wait", "origin", "last",
           "previous_end", "earlier_t0", "earlier_label")
_TYPES = dict(zip(_FIELDS, ["s", "f", "f", "s", "s", "s", "s", "b", "i", "s", "i", "i", "s", "s", "i", "f", "i", "i", "i",
                            "i", "i", "f", "f", "f", "f", "s"], strict=True))
_FIELD_TYPES = {"s": CharField, "f": FloatField, "i": IntegerField, "b": BooleanField}
_EXACT, _GROUP, _DETAIL = "a", "g", "d"


def attempt_rows(*, run: Run, stop_uid: str, floor_s: float, end_s: float) -> list[AttemptRow] | MergedAttempts:
    """The run's attempts in one query: every one (in trace order), or above AGGREGATE_ABOVE the
    columns the database merged with the attempts that title them and the notable ones.

    `stop_uid`: the attempt that stopped the run (or met the criteria); `floor_s`, `end_s`: the axis'
    ends as the page knows them (the database widens them to the first and the last attempt)."""
    found = _query(run, stop_uid, floor_s, end_s)
    if all(row[13] == _EXACT for row in found):
        return [AttemptRow(**_attempt_of(row)) for row in found]
    at = {name: i for i, name in enumerate(_FIELDS)}
    return MergedAttempts(
        columns=[ColumnRow(capability=row[at["cap"]], column=row[at["col"]], attempts=row[at["n"]],
                           failed=row[at["failed_n"]], repeated=row[at["repeated_n"]], first_id=row[at["first_id"]],
                           after_wait=row[at["is_wait"]])
                 for row in found if row[at["part"]] == _GROUP],
        attempts=[ColumnAttempt(**_attempt_of(row), id=row[at["aid"]], column=row[at["col"]], origin=row[at["origin"]],
                                last=row[at["last"]], previous_end=row[at["previous_end"]],
                                earlier_started=row[at["earlier_t0"]], earlier_label=row[at["earlier_label"]])
                  for row in found if row[at["part"]] == _DETAIL])  # in trace order


def _attempt_of(row: tuple) -> dict[str, Any]:
    """A row's first 13 columns as AttemptRow's fields."""
    return dict(zip(_ATTEMPT_FIELDS, row[:13], strict=True))


_ATTEMPT_FIELDS = tuple(f.name for f in fields(AttemptRow))


def _typed_null(name: str) -> Cast:
    return Cast(Value(None), _FIELD_TYPES[_TYPES[name]]())


def _nulls(*names: str) -> dict[str, Cast]:
    return {name: _typed_null(name) for name in names}


def _attempt_columns(labels_joined: bool = True) -> dict[str, Any]:
    step = Step.objects.filter(pk=OuterRef("step_id")).order_by()  # a few rows: by key, not a join of all
    return {"auid": F("uid"), "t0": EpochSeconds("started_at"), "t1": EpochSeconds("ended_at"),
            "akind": F("kind"), "astatus": F("status"), "code": F("error_code"), "cap": F("capability_name"),
            "repeated": F("repeated_without_progress"), "astep": F("step_id"),
            "key": F("step__key") if labels_joined else Subquery(step.values("key")),
            "rev": F("step__revision__number") if labels_joined else Subquery(step.values("revision__number")),
            "num": F("number"), "sig": F("signature_hash"), "aid": F("id")}


def _query(run: Run, stop_uid: str, floor_s: float, end_s: float) -> list[tuple]:
    """The run's attempts as _FIELDS, in one query: a UNION ALL of three parts, of which a
    one-time condition on the run's attempt count keeps either the first or the other two.

    - At most AGGREGATE_ABOVE attempts: every attempt (part "a"), as the exact path reads them.
    - Above: a row per capability, merged column and "a wait precedes" (part "g"), with its counts
      of attempts, failures and repeats and its first attempt (the earliest recorded that is
      neither a repeat nor the stop, if any); the columns are placed on the axis the page draws,
      whose ends the database computes once from the first and the last attempt started. Then
      (part "d") those first attempts, and the notable ones: the stop trigger's and the first
      repeats, with the earlier attempt each repeats. The renderer takes the notables out of the counts.

    Part "g" is a common table expression that part "d" reads its first attempts from: grouping
    the run's attempts is the query's cost (50,000 attempts sorted by column), paid once, and
    part "d" reads its rows by id (a union of ids, not an OR, which scanned every attempt again).
    """
    attempts = Attempt.objects.filter(run=run).order_by()
    count = Subquery(attempts.values("run").annotate(c=Count("*")).values("c"))
    small = attempts.alias(total=count).filter(total__lte=AGGREGATE_ABOVE).annotate(
        **_attempt_columns(), part=Value(_EXACT), **_nulls(*_FIELDS[15:]))
    connection = connections[router.db_for_read(Attempt)]
    grouped, details = _merged_parts(attempts, attempts.alias(total=count).filter(total__gt=AGGREGATE_ABOVE),
                                     stop_uid, floor_s, end_s, connection)
    (exact_sql, exact_params), (grouped_sql, grouped_params), (details_sql, details_params) = (
        _compiled(part, connection) for part in (small.values_list(*_FIELDS), grouped, details))
    sql = (f"WITH {_COLUMNS} AS ({grouped_sql}) SELECT * FROM ({exact_sql}) exact UNION ALL SELECT * FROM {_COLUMNS} "
           f"UNION ALL SELECT * FROM ({details_sql}) detail ORDER BY part, t0, aid")
    with connection.cursor() as cursor:
        cursor.execute(sql, (*grouped_params, *exact_params, *details_params))
        rows = cursor.fetchall()
    # SQLite answers booleans as 0 and 1.
    repeated = _FIELDS.index("repeated")
    return [row if row[repeated] is None or isinstance(row[repeated], bool)
            else (*row[:repeated], bool(row[repeated]), *row[repeated + 1:]) for row in rows]


# The merged columns' common table expression (part "g"), which part "d" reads its first attempts from.
_COLUMNS = "timeline_columns"


def _compiled(query: QuerySet, connection) -> tuple[str, tuple]:
    """A values_list queryset as SQL with its parameters, its columns named and in _FIELDS' order."""
    sql, params = query.query.get_compiler(connection=connection).as_sql()
    return sql, tuple(params)


def _merged_parts(attempts: QuerySet[Attempt], big: QuerySet[Attempt], stop_uid: str, floor_s: float,
                  end_s: float, connection) -> tuple[QuerySet, QuerySet]:
    """The parts "g" (the merged columns) and "d" (their first attempts, and the notable ones) as _FIELDS."""
    in_order = [F("started_at").asc(), F("id").asc()]
    # The axis' ends, from the (run, started_at, id) index: the first start, the last started attempt's end.
    first_start = Subquery(attempts.order_by(*in_order).annotate(e=EpochSeconds("started_at")).values("e")[:1])
    last_end = Subquery(attempts.order_by("-started_at", "-id").annotate(e=EpochSeconds("ended_at")).values("e")[:1])
    origin = Least(Value(floor_s), first_start, output_field=FloatField())
    last = Greatest(Value(end_s), last_end, output_field=FloatField())
    scale = Value(float(svg.WIDTH - svg.LEFT - svg.RIGHT)) / Greatest(last - origin, Value(0.001))
    column = Floor((Value(float(svg.LEFT)) + (EpochSeconds("started_at") - origin) * scale) / Value(float(svg.MERGE_PX)))
    # The first repeats (twice the connectors: a repeat with no earlier match draws none) and the stop.
    first_repeats = Subquery(attempts.filter(repeated_without_progress=True).order_by(*in_order)
                             .values("id")[:2 * svg.MAX_CONNECTORS])
    notables = [attempts.filter(id__in=first_repeats).values("id")]
    if stop_uid:
        notables.append(attempts.filter(uid=stop_uid).values("id"))
    wait_q = Q(kind__in=("retry", "poll"), number__gt=1)  # a retry or poll follows a wait on its step
    # Per capability, column and whether a wait precedes: counts (notables included: the renderer takes them
    # out) and the column's first attempt (the earliest recorded) that is neither a repeat nor the stop.
    not_notable = Q(repeated_without_progress=False) & ~Q(uid=stop_uid)
    groups = big.annotate(col=column, is_wait=_one_if(wait_q)).values("capability_name", "col", "is_wait").annotate(
        first_id=Coalesce(Min(Case(When(not_notable, then=F("id")))), Min("id")))
    grouped = groups.annotate(
        n=Count("id"), failed_n=Sum(_one_if(~Q(status="ok"))),
        repeated_n=Sum(_one_if(Q(repeated_without_progress=True))),
        cap=F("capability_name"), part=Value(_GROUP),
        **_nulls(*(name for name in _FIELDS if name not in (
            "cap", "col", "n", "failed_n", "repeated_n", "first_id", "is_wait", "part")))
    ).values_list(*_FIELDS)
    earlier = (Attempt.objects.filter(run=OuterRef("run"), signature_hash=OuterRef("signature_hash"),
                                      status=OuterRef("status"), error_code=OuterRef("error_code"))
               .filter(Q(started_at__lt=OuterRef("started_at"))
                       | Q(started_at=OuterRef("started_at"), id__lt=OuterRef("id")))
               .order_by("-started_at", "-id"))
    earlier_label = Concat(Value("r"), Cast("step__revision__number", CharField()), Value("·"), "step__key",
                           Value("#"), Cast("number", CharField()), output_field=CharField())
    # The step's attempt before, along the (step, number) index.
    previous = Attempt.objects.filter(step=OuterRef("step"), number__lt=OuterRef("number")).order_by("-number")
    # The columns' first attempts (from part "g", _COLUMNS) and the notable ones, by id.
    ids = [(f"SELECT first_id FROM {_COLUMNS}", ())] + [_compiled(q, connection) for q in notables]
    details = big.filter(id__in=RawSQL(" UNION ALL ".join(sql for sql, _ in ids),
                                       tuple(p for _, params in ids for p in params))).annotate(
        **_attempt_columns(labels_joined=False), part=Value(_DETAIL), col=column, origin=origin, last=last,
        previous_end=Subquery(previous.annotate(e=EpochSeconds("ended_at")).values("e")[:1]),
        earlier_t0=Case(When(repeated_without_progress=True, then=Subquery(
            earlier.annotate(e=EpochSeconds("started_at")).values("e")[:1])), default=None, output_field=FloatField()),
        earlier_label=Case(When(repeated_without_progress=True, then=Subquery(
            earlier.annotate(label=earlier_label).values("label")[:1])), default=None, output_field=CharField()),
        **_nulls("n", "failed_n", "repeated_n", "first_id", "is_wait"))
    return grouped, details.values_list(*_FIELDS)


def _one_if(q: Q) -> Case:
    return Case(When(q, then=Value(1)), default=Value(0), output_field=IntegerField())
