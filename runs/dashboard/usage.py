"""Tokens, cost and tool calls across runs: the usage rollup, written once per run, and its reads.

Written like the dashboard's rollup (runs.dashboard.rollup): in the transaction that finishes a
run, three grouped INSERT ... SELECT ... ON CONFLICT statements (by model, owner and agent; by
label; by capability), compiled once per database vendor. A window is read in two parts that never
overlap: its whole hours from the rollup and the current hour from the run table (the runs finished
since), so the figures are exact at every moment. Usage is counted at the hour a run finished;
runs still going are shown apart, with what they have spent so far.

Why labels stay fast and exact: a run holds at most one value per label key (RunLabel's unique
(run, key)), so the runs of one key's values never overlap. The label table holds a row per
(hour, key, value); grouping by one key reads its values, and "key not set" is the window's
total less their sum. Grouping by every label at once counts a run under each of its labels,
which the page says.

Capabilities: a run's tokens and cost are spent by its planner, not by any one call. They are
shared among the capabilities it called in proportion to its calls of each (a run that called
none counts under ""), so the capability rows add up to the window's total too.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from django.apps import apps
from django.contrib.auth import get_user_model
from django.db import connection, transaction
from django.db.models import (
    BigIntegerField,
    Case,
    CharField,
    Count,
    Exists,
    ExpressionWrapper,
    F,
    FloatField,
    IntegerField,
    OuterRef,
    QuerySet,
    Subquery,
    Sum,
    Value,
    When,
)
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Cast, Coalesce, Left
from django.utils import timezone

from core.choices import FINISHED_STATUSES, LIVE_STATUSES
from core.projects import project_scope
from runs.dashboard import periods, rollup
from runs.expressions import HOUR_S, EpochHour
from runs.labels import KEY_PATTERN, KEY_RULE
from runs.models import Attempt, Run, RunLabel, UsageCapabilityRollup, UsageLabelRollup, UsageRollup
from runs.upsert import upsert_sql

# The usage page's windows (the dashboard's, less the last hour: usage is read by whole hours).
WINDOWS = {key: periods.WINDOWS[key] for key in ("24h", "7d", "30d")}
DEFAULT_WINDOW = "24h"
GROUPS = {"model": "model", "owner": "owner", "label": "label", "agent": "agent", "capability": "capability"}
DEFAULT_GROUP = "model"
MEASURES = ("tokens", "cost")
# Groups drawn as their own series in the chart; the rest are summed as "other".
CHART_SERIES = 6


# -- what a run counts as ------------------------------------------------------------------------

def finished_operations(runs: QuerySet[Run]) -> QuerySet[Run]:
    """Finished live operations (runs an evaluation made are experiments, left out)."""
    return runs.filter(evaluation__isnull=True, status__in=list(FINISHED_STATUSES), finished_at__isnull=False)


def _model_of_run(prefix: str = ""):
    """The LLM planner's model ("" for the planners without one), cut to the rollup's column."""
    model = Coalesce(KeyTextTransform("model", f"{prefix}planner_config"), Value(""), output_field=CharField())
    return Case(When(**{f"{prefix}planner": "llm"}, then=Left(model, 200)), default=Value(""),
                output_field=CharField())


def _agent_of_run():
    """The gateway agent whose MCP session the run was (0 for none); read through the reverse relation."""
    return Coalesce(F("gateway_session__agent_id"), Value(0), output_field=IntegerField())


def usage_groups(runs: QuerySet[Run], *, hour: bool) -> QuerySet:
    """Runs grouped by (hour finished,) model, owner and agent: u_runs, u_tokens, u_cost, u_calls."""
    keys = {"hour": EpochHour("finished_at")} if hour else {}
    project = ["project_id"] if hour else []   # the rollup's rows are per project
    return (runs.annotate(**keys, model=_model_of_run(), agent=_agent_of_run())
            .values(*project, *keys, "model", "owner_id", "agent").order_by()
            .annotate(u_runs=Count("id"), u_tokens=Sum("tokens"), u_cost=Sum("cost"), u_calls=Sum("tool_calls")))


def label_groups(runs: QuerySet[Run], *, hour: bool) -> QuerySet:
    """The runs' labels grouped by (hour finished,) key and value, with the same measures."""
    keys = {"project_id": F("run__project_id"), "hour": EpochHour("run__finished_at")} if hour else {}
    return (RunLabel.objects.filter(run__in=runs.values("pk")).annotate(**keys).values(*keys, "key", "value")
            .order_by().annotate(u_runs=Count("run_id"), u_tokens=Sum("run__tokens"), u_cost=Sum("run__cost"),
                                 u_calls=Sum("run__tool_calls")))


def capability_groups(runs: QuerySet[Run], *, hour: bool) -> tuple[QuerySet, QuerySet]:
    """(The runs' attempts grouped by (hour finished,) capability, their runs without any attempt):
    u_calls, u_runs and the tokens and cost attributed (a run's share per call: its total / its calls)."""
    calls_of_run = Subquery(Attempt.objects.filter(run_id=OuterRef("run_id")).values("run_id").order_by()
                            .annotate(n=Count("id")).values("n"), output_field=FloatField())
    keys = {"project_id": F("run__project_id"), "hour": EpochHour("run__finished_at")} if hour else {}
    called = (Attempt.objects.filter(run__in=runs.values("pk"))
              .annotate(**keys, token_share=ExpressionWrapper(Cast("run__tokens", FloatField()) / calls_of_run,
                                                              output_field=FloatField()),
                        cost_share=ExpressionWrapper(F("run__cost") / calls_of_run, output_field=FloatField()))
              .values(*keys, "capability_name").order_by()
              .annotate(u_calls=Count("id"), u_runs=Count("run_id", distinct=True), u_tokens=Sum("token_share"),
                        u_cost=Sum("cost_share")))
    run_keys = {"hour": EpochHour("finished_at")} if hour else {}
    project = ["project_id"] if hour else []
    uncalled = (runs.filter(~Exists(Attempt.objects.filter(run_id=OuterRef("pk"))))
                .annotate(**run_keys, capability_name=Value("", output_field=CharField()))
                .values(*project, *run_keys, "capability_name").order_by()
                .annotate(u_calls=Value(0, output_field=BigIntegerField()), u_runs=Count("id"),
                          u_tokens=Cast(Sum("tokens"), FloatField()), u_cost=Sum("cost")))
    return called, uncalled


# -- writing the rollup ------------------------------------------------------------------------

def _statements(runs: QuerySet[Run]) -> list[tuple[str, tuple]]:
    """The three statements that count `runs` (finished live operations) into the usage rollup."""
    called, uncalled = capability_groups(runs, hour=True)
    measures = ["runs", "tokens", "cost", "tool_calls"]
    return [
        upsert_sql(usage_groups(runs, hour=True), UsageRollup,
                   keys=["project_id", "hour", "model", "owner_id", "agent_id"],
                   sources=["project_id", "hour", "model", "owner_id", "agent", "u_runs", "u_tokens", "u_cost",
                            "u_calls"], sums=measures),
        upsert_sql(label_groups(runs, hour=True), UsageLabelRollup, keys=["project_id", "hour", "key", "value"],
                   sources=["project_id", "hour", "key", "value", "u_runs", "u_tokens", "u_cost", "u_calls"],
                   sums=measures),
        upsert_sql([called, uncalled], UsageCapabilityRollup, keys=["project_id", "hour", "capability_name"],
                   sources=["project_id", "hour", "capability_name", "u_calls", "u_runs", "u_tokens", "u_cost"],
                   sums=["calls", "runs", "tokens", "cost"]),
    ]


_NO_RUN = -7_358_201_948
_COMPILED: dict[str, list[tuple[str, tuple, frozenset[int]]]] = {}


def _run_statements() -> list[tuple[str, tuple, frozenset[int]]]:
    """record_run_finished's statements, compiled once per database vendor (as the dashboard's are)."""
    if connection.vendor not in _COMPILED:
        with project_scope(None):   # compiled once for every run: no project's filter in them
            statements = _statements(finished_operations(Run.objects.filter(pk=_NO_RUN)))
        _COMPILED[connection.vendor] = [
            (sql, tuple(params), frozenset(n for n, p in enumerate(params) if p == _NO_RUN)) for sql, params in statements]
    return _COMPILED[connection.vendor]


def record_run_finished(*, run_id: int) -> None:
    """Count a run's usage once it has finished. Call in the transaction that finishes it, once
    (runs.services.run_close_open_records, beside the dashboard's rollup)."""
    with connection.cursor() as cursor:
        for sql, params, run_id_at in _run_statements():
            cursor.execute(sql, [run_id if n in run_id_at else p for n, p in enumerate(params)])


@transaction.atomic
def rebuild() -> None:
    """Recount the usage rollup from the run, label and attempt tables (after a bulk load or a restore)."""
    for model in (UsageRollup, UsageLabelRollup, UsageCapabilityRollup):
        model.objects.all().delete()
    with connection.cursor() as cursor:
        for sql, params in _statements(finished_operations(Run.objects.all())):
            cursor.execute(sql, params)


# -- reading ------------------------------------------------------------------------------------

@dataclass
class UsageRow:
    key: str            # the group's value as stored ("" for none), or "key=value" for labels
    label: str          # as shown
    runs: int = 0
    tokens: float = 0
    cost: float = 0.0
    calls: int = 0
    tokens_by_bucket: list[float] = field(default_factory=list)
    cost_by_bucket: list[float] = field(default_factory=list)


@dataclass
class UsageReport:
    window: periods.TimeWindow
    group: str
    label_key: str
    start: datetime
    end: datetime
    bucket_starts: list[datetime]
    rows: list[UsageRow]
    totals: UsageRow
    live: dict
    overlapping: bool   # a run may count in several rows (every label at once)


def _bucket_of_hour(start: datetime, bucket_s: int):
    seconds = F("hour") * Value(HOUR_S, output_field=BigIntegerField())
    return ExpressionWrapper((seconds - int(start.timestamp())) / bucket_s, output_field=BigIntegerField())


# Per group: (rollup model, its group columns, the measures as (rollup column, grouped column)).
_MEASURES = [("runs", "u_runs"), ("tokens", "u_tokens"), ("cost", "u_cost")]


def _read(group: str, span: periods.Span, label_key: str) -> list[tuple[int | None, tuple, dict]]:
    """(bucket index or None for the current hour, group value, measures) from the rollup and the table."""
    rows: list[tuple[int | None, tuple, dict]] = []
    model, columns, calls = {
        "model": (UsageRollup, ["model"], "tool_calls"), "owner": (UsageRollup, ["owner_id"], "tool_calls"),
        "agent": (UsageRollup, ["agent_id"], "tool_calls"), "label": (UsageLabelRollup, ["key", "value"], "tool_calls"),
        "capability": (UsageCapabilityRollup, ["capability_name"], "calls")}[group]
    if span.has_rollup:
        first, last = span.rollup_hours
        stored = model._default_manager.filter(hour__gte=first, hour__lt=last)
        if group == "label" and label_key:
            stored = stored.filter(key=label_key)
        for row in (stored.annotate(i=_bucket_of_hour(span.start, span.bucket_s)).values("i", *columns).order_by()
                    .annotate(m_runs=Sum("runs"), m_tokens=Sum("tokens"), m_cost=Sum("cost"), m_calls=Sum(calls))):
            rows.append((row["i"], tuple(row[c] for c in columns),
                         {"runs": row["m_runs"], "tokens": row["m_tokens"], "cost": row["m_cost"],
                          "calls": row["m_calls"]}))
    if span.has_tail:
        recent = finished_operations(Run.objects.filter(finished_at__gte=span.split, finished_at__lte=span.end))
        if group == "capability":
            called, uncalled = capability_groups(recent, hour=False)
            tail: list[tuple[tuple, dict]] = [((r["capability_name"],), r) for r in [*called, *uncalled]]
        elif group == "label":
            labelled = label_groups(recent, hour=False)
            if label_key:
                labelled = labelled.filter(key=label_key)
            tail = [((r["key"], r["value"]), r) for r in labelled]
        else:
            column = {"model": "model", "owner": "owner_id", "agent": "agent"}[group]
            tail = [((r[column],), r) for r in usage_groups(recent, hour=False)]
        for value, r in tail:
            rows.append((None, value, {"runs": r["u_runs"], "tokens": r["u_tokens"] or 0, "cost": r["u_cost"] or 0.0,
                                       "calls": r["u_calls"] or 0}))
    return rows


def usage_report(*, window_key: str = DEFAULT_WINDOW, group: str = DEFAULT_GROUP, label_key: str = "",
                 now: datetime | None = None) -> UsageReport:
    """Tokens, cost, runs and calls of the runs finished in the window, per group and per bucket."""
    window = WINDOWS[window_key]
    now = now or timezone.now()
    start, end, starts = periods.window_bounds(window, now)
    span = periods.span_for(window, start, now)
    current = len(starts) - 1   # the current hour lies in the last bucket (buckets are whole hours)
    by_key: dict[tuple, UsageRow] = {}
    totals = UsageRow(key="", label="total", tokens_by_bucket=[0] * len(starts), cost_by_bucket=[0.0] * len(starts))
    for i, value, m in _read(group, span, label_key):
        i = current if i is None else i
        if not 0 <= i < len(starts):
            continue
        row = by_key.setdefault(value, UsageRow(key="=".join(map(str, value)), label="",
                                                tokens_by_bucket=[0] * len(starts),
                                                cost_by_bucket=[0.0] * len(starts)))
        _add(row, i, m)
    if group in ("label", "capability"):
        # The window's totals come from the model table: a run counts once there, whatever its labels
        # and capabilities (a run that called two capabilities is one of the runs of each).
        for i, _value, m in _read("model", span, ""):
            i = current if i is None else i
            if 0 <= i < len(starts):
                _add(totals, i, m)
        if label_key:
            unset = _difference(totals, by_key.values(), len(starts))
            if unset.runs:
                by_key[(label_key, None)] = unset
    else:
        for row in by_key.values():
            _add_row(totals, row)
    rows = sorted(by_key.values(), key=lambda r: (-r.cost, -r.tokens, r.key))
    _name_rows(group, rows, label_key)
    return UsageReport(window=window, group=group, label_key=label_key, start=start, end=end, bucket_starts=starts,
                       rows=rows, totals=totals, live=live_usage(), overlapping=group == "label" and not label_key)


def _add(row: UsageRow, i: int, m: dict) -> None:
    row.runs += m["runs"] or 0
    row.tokens += m["tokens"] or 0
    row.cost += m["cost"] or 0.0
    row.calls += m["calls"] or 0
    row.tokens_by_bucket[i] += m["tokens"] or 0
    row.cost_by_bucket[i] += m["cost"] or 0.0


def _add_row(total: UsageRow, row: UsageRow) -> None:
    total.runs += row.runs
    total.tokens += row.tokens
    total.cost += row.cost
    total.calls += row.calls
    for i, (t, c) in enumerate(zip(row.tokens_by_bucket, row.cost_by_bucket, strict=True)):
        total.tokens_by_bucket[i] += t
        total.cost_by_bucket[i] += c


def _difference(totals: UsageRow, rows, n: int) -> UsageRow:
    """The window's runs without the label key: the totals less its values' rows (which never overlap)."""
    unset = UsageRow(key="", label="", runs=totals.runs, tokens=totals.tokens, cost=totals.cost, calls=totals.calls,
                     tokens_by_bucket=list(totals.tokens_by_bucket), cost_by_bucket=list(totals.cost_by_bucket))
    for row in rows:
        unset.runs -= row.runs
        unset.tokens -= row.tokens
        unset.cost -= row.cost
        unset.calls -= row.calls
        for i in range(n):
            unset.tokens_by_bucket[i] -= row.tokens_by_bucket[i]
            unset.cost_by_bucket[i] -= row.cost_by_bucket[i]
    unset.cost = max(0.0, round(unset.cost, 9))
    return unset


def _name_rows(group: str, rows: list[UsageRow], label_key: str) -> None:
    names: dict = {}
    if group == "owner":
        names = dict(get_user_model().objects.filter(pk__in=[int(r.key) for r in rows])
                     .values_list("pk", "username"))
    elif group == "agent":
        # The gateway sits above runs: its model by name, not by import.
        agent = apps.get_model("gateway", "Agent")
        names = dict(agent.objects.filter(pk__in=[int(r.key) for r in rows if r.key != "0"]).values_list("pk", "name"))
    for row in rows:
        if group == "owner":
            row.label = names.get(int(row.key), f"user {row.key}")
        elif group == "agent":
            row.label = names.get(int(row.key), f"agent {row.key}") if row.key != "0" else "no agent"
        elif group == "model":
            row.label = row.key or "no model (not an LLM planner)"
        elif group == "capability":
            row.label = row.key or "no tool call"
        else:
            row.label = row.key or f"{label_key} not set"


def live_usage() -> dict:
    """Runs still going (not yet in any row above): how many, and what they have spent so far."""
    figures = Run.objects.filter(evaluation__isnull=True, status__in=list(LIVE_STATUSES)).aggregate(
        runs=Count("id"), tokens=Sum("tokens"), cost=Sum("cost"))
    return {"runs": figures["runs"], "tokens": figures["tokens"] or 0, "cost": figures["cost"] or 0.0}


# -- the burn rule's sums ---------------------------------------------------------------------

def window_spend(*, hours: int, now: datetime, owner_id: int | None = None, label: tuple[str, str] | None = None
                 ) -> dict:
    """Tokens and cost of the runs (of an owner, or carrying a label) that finished in the current hour
    and the `hours` - 1 before it: read from the rollup alone (it holds every finished run, the
    current hour's included), one indexed query."""
    last = rollup.hour_of(now)
    rows: QuerySet
    if label is not None:
        rows = UsageLabelRollup.objects.filter(key=label[0], value=label[1])
    else:
        rows = UsageRollup.objects.filter(owner_id=owner_id or 0)
    figures = rows.filter(hour__gt=last - hours, hour__lte=last).aggregate(tokens=Sum("tokens"), cost=Sum("cost"),
                                                                           runs=Sum("runs"))
    return {"tokens": figures["tokens"] or 0, "cost": figures["cost"] or 0.0, "runs": figures["runs"] or 0}


# -- the page's and the API's query ------------------------------------------------------------

def query_problems(*, window: str, group: str, measure: str, label_key: str) -> dict[str, str]:
    """What is wrong with a usage query, per parameter ({} when it is fine)."""
    problems = {}
    if window not in WINDOWS:
        problems["window"] = f"Unknown time window “{window[:40]}”: choose one of {', '.join(WINDOWS)}."
    if group not in GROUPS:
        problems["group"] = f"Unknown grouping “{group[:40]}”: choose one of {', '.join(GROUPS)}."
    if measure not in MEASURES:
        problems["measure"] = f"Unknown measure “{measure[:40]}”: choose one of {', '.join(MEASURES)}."
    if label_key and not KEY_PATTERN.match(label_key):
        problems["label_key"] = f"“{label_key[:70]}” is not a label key: {KEY_RULE}."
    elif label_key and group != "label":
        problems["label_key"] = "label_key goes with group=label only."
    return problems


def chart_series(report: UsageReport, measure: str) -> dict[str, list[float]]:
    """The chart's series: the biggest groups by `measure`, each its own, the rest summed as "other"."""
    by = "cost_by_bucket" if measure == "cost" else "tokens_by_bucket"
    ranked = sorted(report.rows, key=lambda r: -(r.cost if measure == "cost" else r.tokens))
    series = {row.label: [round(v, 6) for v in getattr(row, by)] for row in ranked[:CHART_SERIES]}
    rest = ranked[CHART_SERIES:]
    if rest:
        series["other"] = [round(sum(getattr(r, by)[i] for r in rest), 6) for i in range(len(report.bucket_starts))]
    return {name: values for name, values in series.items() if any(values)}
