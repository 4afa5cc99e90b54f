"""What an external agent reads before it proposes the next plan (GET /api/runs/<id>/planning/)."""
from __future__ import annotations

from dataclasses import dataclass
from functools import reduce
from operator import or_
from typing import Any

from django.db.models import Q

from core.choices import FINISHED_STATUSES
from runs import checkpoint
from runs.models import PlanSubmission, Run
from runs.planners.external import awaited_revision
from runs.planners.llm import observation_for_planner
from runs.worker.adapters import DjangoRegistry, OwnerAuthorizer
from runtime.history import HistoryEntry
from runtime.stop import ReplanReason


@dataclass(frozen=True)
class PlanningMoment:
    """What a long poll watches: an answer is due when any of it changes (or a plan is needed, or the
    run has finished). Cheap to read: the run's row and at most one more query."""

    needs_plan: bool
    plan_submitted: bool
    revision: int
    status: str
    stop_reason: str
    usage: tuple

    @property
    def settled(self) -> bool:
        """Nothing to wait for: a plan is needed now, or the run has finished."""
        return self.needs_plan or self.status in FINISHED_STATUSES


def planning_moment(run: Run, *, submitted: bool | None = None) -> PlanningMoment:
    """submitted: whether the awaited revision has a plan, when the caller has read it already."""
    state = run.state or {}
    awaited = awaited_revision(run)
    if awaited is None:
        submitted = False
    elif submitted is None:
        submitted = PlanSubmission.objects.filter(run=run, revision=awaited).exists()
    return PlanningMoment(
        needs_plan=run.planner == "external" and awaited is not None and not submitted,
        plan_submitted=submitted, revision=int((state.get("usage") or {}).get("plans", 0)) + 1,
        status=run.status, stop_reason=run.stop_reason,
        usage=(run.iterations, run.revisions, run.tool_calls, run.tokens, run.cost))


def planning_moments_of(run_ids: list[int]) -> dict[int, PlanningMoment]:
    """The planning moments of these runs (those that still exist), in two queries however many."""
    runs = list(Run.objects.filter(pk__in=run_ids).only(*MOMENT_FIELDS))
    awaited = {run.pk: revision for run in runs if (revision := awaited_revision(run)) is not None}
    submitted: set[int] = set()
    if awaited:
        which = reduce(or_, (Q(run_id=run_id, revision=revision) for run_id, revision in awaited.items()))
        submitted = set(PlanSubmission.objects.filter(which).values_list("run_id", flat=True))
    return {run.pk: planning_moment(run, submitted=run.pk in submitted) for run in runs}


def planning_moment_of(run_id: int) -> PlanningMoment | None:
    """The run's planning moment, None when the run is gone."""
    return planning_moments_of([run_id]).get(run_id)


# The columns planning_moment() reads (a long poll's watcher re-reads them several times a second).
MOMENT_FIELDS = ("planner", "state", "status", "stop_reason", "iterations", "revisions", "tool_calls", "tokens",
                 "cost")


def planning_needs(run: Run, *, proposer_id: int | None = None) -> dict[str, Any]:
    """Everything an external agent needs to propose the next plan (a read: no change).

    proposer_id: who would submit that plan (the reader). A plan someone other than the owner
    proposes runs with both users' permissions (runs.worker.adapters.OwnerAuthorizer), so only the
    capabilities both may use are offered, as validation will then enforce.
    """
    state = run.state or {}
    planning = state.get("planning") or {}
    moment = planning_moment(run)
    awaited = awaited_revision(run)
    history = [HistoryEntry.from_dict(h) for h in checkpoint.history(run)]
    owner = run.owner if Run.owner.is_cached(run) else None
    capabilities = DjangoRegistry().visible(OwnerAuthorizer(run.owner_id, owner=owner, proposer_id=proposer_id))
    return {
        "run": run.pk,
        "needs_plan": moment.needs_plan,
        "plan_submitted": moment.plan_submitted,
        "revision": moment.revision,
        "goal": run.goal,
        "completion": run.completion,
        "reason_code": planning.get("reason_code") if awaited is not None else None,
        "reason": planning.get("reason", "") if awaited is not None else "",
        "validation_errors": list(planning.get("validation_errors") or []) if awaited is not None else [],
        "previous_plan": _previous_plan(run, planning),
        "observations": [{"attempt_id": h.attempt_id, "kind": h.kind, **observation_for_planner(h)}
                         for h in history],
        "capabilities": [{"name": c.name, "description": c.description, "schema": c.schema,
                          "side_effect": c.side_effect.value, "requires_approval": c.requires_approval}
                         for c in capabilities],
        "budgets": run.budgets,
        "usage": {"iterations": run.iterations, "revisions": run.revisions, "tool_calls": run.tool_calls,
                  "tokens": run.tokens, "cost": run.cost},
        "deadline_at": run.deadline_at,
        "status": run.status,
        "stop_reason": run.stop_reason or None,
        "stop_detail": run.stop_detail,
    }


def _previous_plan(run: Run, planning: dict[str, Any]) -> list[dict[str, Any]]:
    """The rejected plan being corrected, else the last accepted plan (as the controller tells any planner)."""
    if planning.get("reason_code") == ReplanReason.PLAN_REJECTED.value:
        raw = planning.get("rejected_plan")
        raw = raw.get("steps") if isinstance(raw, dict) else raw
        return [x for x in raw if isinstance(x, dict)] if isinstance(raw, list) else []
    return checkpoint.plan_steps(run)
