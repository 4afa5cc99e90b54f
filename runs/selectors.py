"""Reads for pages and the API. Writes live in runs.services.

Every function here issues a fixed number of queries whatever the size of the
run or the table: lists are paginated, counts are aggregated in the database.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import connections
from django.db.models import (
    Count,
    Exists,
    OuterRef,
    Prefetch,
    Q,
    QuerySet,
    Subquery,
    TextField,
    prefetch_related_objects,
)
from django.db.models.functions import Cast, Coalesce
from django.urls import reverse
from django.utils import timezone
from psycopg import pq

from capabilities.models import Capability
from core.choices import LIVE_STATUSES, ApprovalState
from core.pagination import Ordering
from core.projects import project_scope
from runs import search
from runs.dashboard.budget_usage import run_budget_usage
from runs.expressions import IsoText
from runs.models import (
    Approval,
    Attempt,
    Decision,
    PlannerCall,
    PlanRevision,
    Reconciliation,
    Run,
    Step,
)
from runs.querytools import narrowed, one_of
from runs.trace.review import with_review_fields
from runtime.plan import step_changes
from runtime.stop import StopReason
from runtime.storable import text_unstorable

RUNS_PER_PAGE = 50
# A filter matching at most this many runs is resolved to their ids first (see _used_capability).
SELECTIVE_MATCHES = 25_000
ATTEMPTS_PER_PAGE = 100
APPROVALS_PER_PAGE = 20

# Sort keys the runs list accepts, mapped to indexed (or at least total) orderings.
RUN_SORTS = {
    "created": ("created_at", "id"),
    "-created": ("-created_at", "-id"),
    "finished": ("finished_at", "id"),
    "-finished": ("-finished_at", "-id"),
    # Usage: the finished runs' counters (Run.final_*, NULL while a run is live: live runs last).
    "tool_calls": ("final_tool_calls", "id"),
    "-tool_calls": ("-final_tool_calls", "-id"),
    "tokens": ("final_tokens", "id"),
    "-tokens": ("-final_tokens", "-id"),
    "cost": ("final_cost", "id"),
    "-cost": ("-final_cost", "-id"),
}
# Sort values that are NULL for a live run: those runs come after the others, in either direction.
NULLABLE_SORTS = frozenset({"finished_at", "final_tool_calls", "final_tokens", "final_cost"})


def pending_approval_count() -> int:
    # A request past its expiry is no longer decidable, even before the sweep marks it.
    return Approval.objects.filter(state="pending", expires_at__gt=timezone.now()).count()


# --- Runs list -----------------------------------------------------------------


@dataclass(frozen=True)
class RunFilters:
    status: str = ""
    stop_reason: str = ""
    capability: str = ""
    owner: str = ""  # username
    planner: str = ""
    created_from: datetime | None = None
    created_to: datetime | None = None
    sort: str = "-created"
    # Search (runs.search): labels as ((key, value or None), ...), goal text, stall kind.
    labels: tuple = ()
    goal: str = ""
    stall_kind: str = ""
    # Goals, stop details and the attempts' search documents (runs.explorer.run_text_search).
    q: str = ""
    # Drill-down from the dashboard: which runs are behind a figure.
    stop_kind: str = ""  # budget_exhausted, terminal_failure (any qualifier)
    stop_capability: str = ""  # capability of the attempt that stopped the run; "(none)": no attempt
    finished_from: datetime | None = None
    finished_to: datetime | None = None
    repeated: bool = False  # runs with at least one attempt repeated without progress
    evaluation_runs: str = "hide"  # hide | show | only


# Run filters that keep the runs whose field matches the value given (page and API alike).
RUN_LOOKUPS = {"finished_from": "finished_at__gte", "finished_to": "finished_at__lte",
                "stop_reason": "stop_reason", "owner": "owner__username", "planner": "planner",
                "created_from": "created_at__gte", "created_to": "created_at__lte"}


def run_ordering(sort: str) -> Ordering:
    """The keyset ordering of a sort key (unknown keys sort newest first). Unfinished runs
    sort after finished ones by finish time or usage, in either direction."""
    return Ordering.of(RUN_SORTS.get(sort, RUN_SORTS["-created"]), nullable=NULLABLE_SORTS)


def run_list(*, filters: RunFilters) -> QuerySet[Run]:
    runs = Run.objects.select_related("owner").defer("state", "completion", "planner_config")
    if filters.status == "active":
        runs = runs.filter(status__in=LIVE_STATUSES)
    elif filters.status == "finished":
        runs = runs.exclude(status__in=LIVE_STATUSES)
    elif filters.status:
        runs = runs.filter(status=filters.status)
    if filters.evaluation_runs == "hide":
        runs = runs.filter(evaluation__isnull=True)
    elif filters.evaluation_runs == "only":
        runs = runs.filter(evaluation__isnull=False)
    if filters.stop_kind:
        runs = runs.filter(stop_reason__startswith=StopReason.prefix(filters.stop_kind))
    if filters.stop_capability == "(none)":
        runs = runs.filter(stop_attempt__isnull=True)
    elif filters.stop_capability:
        runs = runs.filter(stop_attempt__capability_name=filters.stop_capability)
    if filters.repeated:
        runs = runs.filter(repeated_attempts__gt=0)
    runs = narrowed(runs, filters, RUN_LOOKUPS)
    if filters.capability:
        runs = runs.filter(_used_capability(filters.capability))
    runs = search.apply_search(runs, filters)
    return runs.order_by(*run_ordering(filters.sort).order_by())


def _used_capability(name: str):
    """Runs that called this capability.

    While few runs did (up to SELECTIVE_MATCHES, counted on the (capability, run)
    index), their ids are found first and the runs probed by id, so no sort order can
    make the database walk a million runs looking for the few that match. Beyond that
    matches are common, and an EXISTS probe per run along the sort index finds a page
    quickly.

    The attempts are read unscoped: the runs they select are the project's by the list's own
    filter, and the scope's check of each attempt's run (a lookup per attempt: 40,000 of them for a
    capability 20,000 runs used) doubled the page's time at 1M runs.
    """
    used_by = Attempt._base_manager.filter(capability_name=name).order_by().values("run_id").distinct()
    if used_by[:SELECTIVE_MATCHES + 1].count() <= SELECTIVE_MATCHES:
        return one_of(Run, "id", used_by)
    return Q(Exists(Attempt._base_manager.filter(run=OuterRef("pk"), capability_name=name)))


# --- One run's trace -------------------------------------------------------------


def run_get(*, run_id: int) -> Run:
    # The stop attempt comes with its step, revision and decision: the stop box names it (r2·s1#1).
    return (Run.objects.select_related("owner", "stop_attempt__step__revision", "stop_attempt__decision")
            .defer("stop_attempt__output", "stop_attempt__step__revision__planner_output",
                   "stop_attempt__step__revision__steps", "stop_attempt__decision__usage").get(pk=run_id))


def run_revisions(*, run: Run) -> list[PlanRevision]:
    revisions = list(PlanRevision.objects.filter(run=run).select_related("triggering_attempt__step")
                     .defer("triggering_attempt__output").order_by("number"))
    previous = None
    for revision in revisions:
        revision.diff = revision_diff(revision.changes, previous.steps if previous else None, revision.steps)
        previous = revision
    return revisions


def run_steps(*, run: Run) -> list[Step]:
    """All steps of a run (bounded by the plan-size budget) with their attempt counts."""
    # A count per step from the (step, number) index, not a join of every attempt grouped by step.
    counts = (Attempt.objects.filter(step=OuterRef("pk")).order_by().values("step")
              .annotate(n=Count("*")).values("n"))
    return list(Step.objects.filter(run=run).select_related("revision", "capability_version")
                .annotate(attempt_count=Coalesce(Subquery(counts), 0)).order_by("revision__number", "index"))


def run_attempts(*, run: Run) -> QuerySet[Attempt]:
    """A run's attempts in order, light enough to page through thousands."""
    return with_review_fields(Attempt.objects.filter(run=run).select_related("step", "decision", "output_ref")
                              .defer("output", "output_ref__content", "decision__usage").order_by("started_at", "id"))


def run_attempt_ids(*, run: Run) -> QuerySet:
    """A run's attempt ids in trace order: paged (COUNT and OFFSET) on the (run, started_at, id)
    index alone, so a late page of 50,000 attempts reads ids, not 50,000 rows."""
    return Attempt.objects.filter(run=run).order_by("started_at", "id").values_list("id", flat=True)


def attempts_in_order(*, run: Run, ids) -> list[Attempt]:
    """The attempts with these ids (a list, or a sliced run_attempt_ids queryset) in trace order."""
    return list(run_attempts(run=run).filter(pk__in=ids))


def attempt_position(*, run: Run, uid: str) -> int | None:
    """The 0-based index of an attempt in run_attempts order, to find its page."""
    attempt = Attempt.objects.filter(run=run, uid=uid).values("started_at", "id").first()
    if attempt is None:
        return None
    return Attempt.objects.filter(run=run).filter(
        Q(started_at__lt=attempt["started_at"]) | Q(started_at=attempt["started_at"], id__lt=attempt["id"])).count()


def run_capability_calls(*, run: Run) -> dict[str, int]:
    # COUNT(*), not COUNT(id): the (run, capability_name) index answers it alone.
    rows = Attempt.objects.filter(run=run).values("capability_name").annotate(n=Count("*")).order_by()
    return {row["capability_name"]: row["n"] for row in rows}


def run_approvals(*, run: Run) -> list[Approval]:
    return list(Approval.objects.filter(run=run).select_related("decided_by", "step", "revision")
                .order_by("requested_at", "id"))


def attempt_get(*, run_id: int, uid: str) -> Attempt:
    if text_unstorable(uid):   # no attempt's id, and PostgreSQL refuses the query (a %00 in an address)
        raise Attempt.DoesNotExist(f"No attempt {uid!r}.")
    return (with_review_fields(Attempt.objects.select_related("run", "step", "step__revision", "decision",
                                                              "output_ref", "capability_version__capability"))
            .defer("output_ref__content").get(run_id=run_id, uid=uid))


BUDGET_LABELS = {"iterations": "Iterations", "revisions": "Plan revisions", "tool_calls": "Tool calls",
                 "tokens": "Tokens", "cost": "Cost", "retries": "Retries", "deadline": "Time (deadline)",
                 "capability_calls": "Calls to", "side_effect_rate": "Side effects per minute"}


@dataclass(frozen=True)
class Gauge:
    name: str
    label: str
    used: float
    limit: float | None
    unit: str = ""
    exhausted: bool = False
    estimated: float = 0   # of used: counted at a lost planner call's maximum (tokens, cost)

    @property
    def percent(self) -> int:
        if not self.limit:
            return 0
        return max(0, min(100, round(100 * self.used / self.limit)))


def _number(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def budget_gauges(*, run: Run, capability_calls: dict[str, int] | None = None) -> list[Gauge]:
    """One gauge per budget the run declares, the one that stopped it marked exhausted.

    The rows come from runs.dashboard.budget_usage, which the API reports too: the page only
    labels them. (capability_calls is accepted for callers that still pass it.)
    """
    stopped_by = (reason := StopReason.of(run.stop_reason)) and reason.budget
    gauges = []
    for row in run_budget_usage(run):
        if row["limit"] is None and not row["exhausted"]:
            continue
        label = (f"Calls to {row['capability']}" if row["name"] == "capability_calls"
                 else BUDGET_LABELS.get(row["name"], row["name"]))
        gauges.append(Gauge(row["name"], label, row["used"], _number(row["limit"]),
                            unit="s" if row["name"] == "deadline" else "", exhausted=row["exhausted"],
                            estimated=row.get("estimated", 0)))
    if stopped_by and not any(g.exhausted for g in gauges):
        gauges.append(Gauge(stopped_by, BUDGET_LABELS.get(stopped_by, stopped_by), 0, None, exhausted=True))
    return gauges


def revision_diff(changes: Any, previous_steps: Any, steps: Any) -> list[tuple[str, str]]:
    """What a revision changed as (kind, text) lines: kind is added, removed, changed or note.

    The runtime records `changes` (its shape is the runtime's); render any dict of
    lists or strings, and compare the step lists ourselves when it recorded nothing.
    """
    lines: list[tuple[str, str]] = []
    if isinstance(changes, dict) and changes:
        for key, value in changes.items():
            if key == "summary":
                continue
            kind = key if key in ("added", "removed", "changed") else "note"
            items = value if isinstance(value, list) else [value]
            for item in items:
                text = item if isinstance(item, str) else _describe(item)
                lines.append((kind, text if kind != "note" else f"{key}: {text}"))
        if not lines and changes.get("summary"):
            lines.append(("note", str(changes["summary"])))
        return lines
    if isinstance(changes, (list, str)) and changes:
        return [("note", c if isinstance(c, str) else _describe(c)) for c in (changes if isinstance(changes, list)
                                                                               else [changes])]
    if previous_steps is None:
        return []
    return _compare_steps(previous_steps, steps)


def _describe(item: Any) -> str:
    if isinstance(item, dict):
        ident = item.get("id") or item.get("step_id") or item.get("key")
        cap = item.get("capability")
        if ident or cap:
            return " ".join(str(x) for x in (ident, f"({cap})" if cap else None) if x)
    import json

    return json.dumps(item, sort_keys=True, default=str)


def _steps_by_id(steps: Any) -> dict[str, dict]:
    result = {}
    for position, step in enumerate(steps if isinstance(steps, list) else []):
        if isinstance(step, dict):
            result[str(step.get("id") or step.get("key") or f"#{position + 1}")] = step
    return result


def _compare_steps(previous: Any, current: Any) -> list[tuple[str, str]]:
    changes = step_changes(_steps_by_id(previous), _steps_by_id(current))
    lines = [(kind, text) for kind in ("added", "removed", "changed") for text in changes[kind]]
    return lines or [("note", "no change to the steps")]


# --- Approval inbox ---------------------------------------------------------------


def pending_approvals() -> QuerySet[Approval]:
    return _approval_cards_queryset().filter(state=ApprovalState.PENDING, expires_at__gt=timezone.now()).order_by(
        "requested_at", "id")


def _approval_cards_queryset() -> QuerySet[Approval]:
    return Approval.objects.select_related(
        "run", "run__owner", "revision", "step", "step__capability_version", "decided_by",
    ).defer("run__state", "run__completion", "revision__planner_output")


def approval_card(*, approval_id: int, user=None) -> Approval:
    approval = _approval_cards_queryset().get(pk=approval_id)
    decorate_approvals([approval], user=user)
    return approval


def approval_refusal(*, approval: Approval, user) -> str | None:
    """Why `user` may not decide `approval` (the four-eyes rule), or None: shown before the click, and enforced."""
    if settings.AGENTOPS_FOUR_EYES:
        # Two people: neither the run's owner nor whoever proposed the plan may decide on it.
        if approval.run.owner_id == user.pk:
            return "Four-eyes rule: you cannot approve or reject steps of your own run."
        if approval.revision.proposed_by_id == user.pk:
            return "Four-eyes rule: you cannot approve or reject steps you proposed."
    return None


def decorate_approvals(approvals: list[Approval], *, user=None) -> list[Approval]:
    """Attach what a card shows: steps before it, plan steps with side effects, who was asked and
    when, and (for `user`) the four-eyes refusal before any click. Three queries."""
    _attach_asked(approvals)
    revision_ids = {a.revision_id for a in approvals if a.kind == "step"}
    siblings: dict[int, list[Step]] = {}
    if revision_ids:
        for step in Step.objects.filter(revision_id__in=revision_ids).only(
                "id", "revision_id", "index", "key", "capability_name", "status", "approval_state").order_by("index"):
            siblings.setdefault(step.revision_id, []).append(step)
    names = set()
    for approval in approvals:
        if approval.kind == "plan":
            names |= {str(s.get("capability")) for s in approval.revision.steps if isinstance(s, dict)}
    policies = {name: (side_effect, needs) for name, side_effect, needs in Capability.objects.filter(
        name__in=names).values_list("name", "current_version__side_effect", "current_version__requires_approval")} \
        if names else {}
    side_effects = {name: policy[0] for name, policy in policies.items()}
    for approval in approvals:
        if approval.kind == "step" and approval.step is not None:
            approval.prior_steps = [s for s in siblings.get(approval.revision_id, []) if s.index < approval.step.index]
        else:
            approval.prior_steps = []
        approval.plan_steps = []
        if approval.kind == "plan":
            for step in approval.revision.steps if isinstance(approval.revision.steps, list) else []:
                if not isinstance(step, dict):
                    continue
                side_effect = side_effects.get(str(step.get("capability")))
                approval.plan_steps.append({
                    "id": step.get("id", ""), "capability": step.get("capability", ""),
                    "arguments": step.get("arguments", {}), "expected_outcome": step.get("expected_outcome", ""),
                    "depends_on": step.get("depends_on", []), "side_effect": side_effect or "unknown",
                    "side_effecting": side_effect in ("write", "external"),
                })
        approval.bound_hash = approval.arguments_hash or approval.plan_hash
        # Approving a plan does not approve its side-effecting steps: the card says which will ask again.
        approval.steps_needing_approval = [
            s for s in approval.plan_steps
            if s["side_effecting"] or policies.get(str(s["capability"]), (None, False))[1]]
        # A request dies at the earlier of its time to live and the run's deadline (design.md).
        deadline = approval.run.deadline_at
        if deadline is not None and deadline < approval.expires_at:
            approval.effective_expires_at, approval.expiry_cause = deadline, "deadline"
        else:
            approval.effective_expires_at, approval.expiry_cause = approval.expires_at, "ttl"
        _decorate_expiry(approval)
        approval.four_eyes_refusal = approval_refusal(approval=approval, user=user) if user is not None else None
    return approvals


def _attach_asked(approvals: list[Approval]) -> None:
    """The notifications sent about each request (newest first), through their reverse relation
    (`notifications`, from the notifications app above this one, which runs does not import)."""
    if not approvals:
        return
    field = Approval._meta.get_field("notifications")
    sent = field.related_model.objects.filter(approval__in=approvals, status="sent").order_by("-sent_at", "-id")
    prefetch_related_objects(approvals, Prefetch("notifications", queryset=sent, to_attr="asked"))


def _decorate_expiry(approval: Approval) -> None:
    """A request expires at the earlier of its TTL and the run's deadline: say which, and
    whether that moment has passed (then it cannot be decided, whatever its state says)."""
    deadline = approval.run.deadline_at
    approval.expires_by = "at the run's deadline" if deadline and approval.expires_at >= deadline else "its TTL"
    approval.lapsed = approval.state == ApprovalState.PENDING and approval.expires_at <= timezone.now()


# --- Trace download -----------------------------------------------------------------


TRACE_ATTEMPT_COLUMNS = (
    "uid", "step__revision__number", "step__key", "number", "kind", "capability_name", "capability_version__number",
    "arguments_json", "signature", "signature_hash", "idempotency_key", "started_text", "ended_text", "latency_s",
    "trace_id", "span_id", "repeated_without_progress", "status", "state_changed", "output_json", "output_ref_id",
    "output_ref__sha256", "output_ref__size_bytes", "error_code", "error_category", "error_message", "retry_guidance",
    "retry_after_s", "side_effect_status", "decision__id", "decision__decision", "decision__reason", "usage_json",
    "decided_text")


def trace_attempt_rows(*, run: Run) -> QuerySet:
    """A run's attempts with their decisions as plain tuples (TRACE_ATTEMPT_COLUMNS), in trace order.

    JSON (outputs, arguments, usage) and timestamps come back as the database's text, to be
    written out as they are: no parse and re-serialise of every output, no model instances.
    A queryset, so the API can page it and the download iterate it in chunks.
    """
    return (Attempt.objects.filter(run=run).order_by("started_at", "id")
            .annotate(output_json=Cast("output", TextField()), arguments_json=Cast("step__arguments", TextField()),
                      usage_json=Cast("decision__usage", TextField()),
                      started_text=IsoText("started_at"), ended_text=IsoText("ended_at"),
                      decided_text=IsoText("decision__created_at"))
            .values_list(*TRACE_ATTEMPT_COLUMNS))


def trace_attempt_stream(*, run: Run) -> Iterator[tuple]:
    """Every row of trace_attempt_rows, as they arrive, for the download.

    On PostgreSQL the query is streamed (libpq's chunked rows mode, 2,000 rows a chunk): the
    server makes the next rows while this process writes the ones it has, and nothing is held.
    Django's own iterator declares a cursor WITH HOLD outside a transaction, which PostgreSQL
    computes and stores whole before the first row (50,000 attempts: 0.5-0.7 s and a 100 MB
    temporary file), then serves a fetch at a time with the writing waiting for each. A reader
    that stops early cancels the query (psycopg drains what was sent), so the connection serves
    the next request. Elsewhere (SQLite; a libpq before 17) the queryset's iterator.
    """
    rows = trace_attempt_rows(run=run)
    alias = rows.db   # the database reads go to now: the replica, if it serves this request
    connection = connections[alias]
    if connection.vendor != "postgresql" or pq.version() < 170000:
        yield from rows.iterator(chunk_size=2000)
        return
    sql, params = rows.query.get_compiler(using=alias).as_sql()
    with connection.cursor() as cursor, connection.wrap_database_errors:
        yield from cursor.cursor.stream(sql, params, size=2000)


def trace_revisions(*, run: Run) -> QuerySet[PlanRevision]:
    return run.plan_revisions.select_related("triggering_attempt").order_by("number")


def trace_planner_calls(*, run: Run) -> QuerySet[PlannerCall]:
    return run.planner_calls.order_by("started_at", "id")


def trace_steps(*, run: Run) -> QuerySet[Step]:
    return run.steps.select_related("revision", "capability_version").order_by("revision__number", "index")


def trace_approvals(*, run: Run) -> QuerySet[Approval]:
    # Through the run's manager, so each approval's run is this one (approval_dict names its goal).
    return run.approvals.select_related("decided_by", "step", "revision").order_by("requested_at", "id")


def trace_decisions_without_attempt(*, run: Run) -> QuerySet[Decision]:
    return Decision.objects.filter(run=run, attempt__isnull=True).order_by("created_at", "id")


def _ids(ids: list[str]) -> list[int]:
    return [int(i) for i in ids if i.isdigit()]


def audit_run_pages(model) -> Callable[[list[str]], dict[str, str]]:
    """For the audit log (core.audit_log): the page of each row of `model` that belongs to a run (its run's)."""
    def pages(ids: list[str]) -> dict[str, str]:
        found = model.objects.filter(pk__in=_ids(ids)).values_list("pk", "run_id")
        return {str(pk): reverse("runs:detail", kwargs={"run_id": run_id}) for pk, run_id in found}
    return pages

# -- forks (runs.forks) -----------------------------------------------------------------------

INHERITED_SHOWN = 50


@dataclass(frozen=True)
class ForkOrigin:
    """Where a fork came from: the source, the call it starts at, and the inherited calls shown."""

    source: Run | None         # None: the source was deleted (the fork keeps its number)
    at: int
    inherited: int             # how many of the source's calls are this run's history
    calls: list                # the last INHERITED_SHOWN of them, in order, each with .position
    resumed: bool              # the fork point is the source's end
    reconciliation: Any = None  # the source's reconciliation, when its call is inherited


def fork_origin(*, run: Run) -> ForkOrigin | None:
    if run.forked_at is None:
        return None
    source = run.forked_from
    if source is None:
        return ForkOrigin(source=None, at=run.forked_at, inherited=run.forked_at - 1, calls=[], resumed=False)
    inherited = run.forked_at - 1
    first = max(0, inherited - INHERITED_SHOWN)
    calls = list(run_attempts(run=source)[first:inherited])
    for offset, attempt in enumerate(calls, start=first + 1):
        attempt.position = offset  # type: ignore[attr-defined]   # the page's label for it
    total = Attempt.objects.filter(run=source).count()
    resumed = run.forked_at == total + 1
    # A reconciled call is the one the source stopped on, its last: inherited by a resume only.
    found = Reconciliation.objects.filter(run=source).select_related("decided_by").first() if resumed else None
    return ForkOrigin(source=source, at=run.forked_at, inherited=inherited, calls=calls,
                      resumed=resumed, reconciliation=found)


def run_forks(*, run: Run) -> list[Run]:
    """The runs forked from this one, oldest first."""
    return list(Run.objects.filter(forked_from=run).select_related("owner").order_by("created_at", "id")
                .only("id", "status", "stop_reason", "forked_at", "owner__username", "created_at", "forked_from"))


def approval_project_id(approval_id: int) -> int:
    """The project of an approval request, whichever project is in scope (0 for none: no project's
    scope finds anything in it). For decisions that arrive from outside a project: Slack, e-mail."""
    with project_scope(None):
        found = Approval.objects.filter(pk=approval_id).values_list("run__project_id", flat=True).first()
    return found or 0
