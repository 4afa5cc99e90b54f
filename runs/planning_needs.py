"""What an external agent reads before it proposes the next plan (GET /api/runs/<id>/planning/)."""
from __future__ import annotations

from typing import Any

from runs.worker.adapters import DjangoRegistry, OwnerAuthorizer
from runs.models import PlanSubmission, Run
from runs.planners.external import awaited_revision
from runs.planners.llm import observation_for_planner
from runtime.history import HistoryEntry
from runtime.stop import ReplanReason


def planning_needs(run: Run) -> dict[str, Any]:
    """Everything an external agent needs to propose the next plan (a read: no change)."""
    state = run.state or {}
    planning = state.get("planning") or {}
    usage = state.get("usage") or {}
    revision = int(usage.get("plans", 0)) + 1
    awaited = awaited_revision(run)
    submitted = awaited is not None and PlanSubmission.objects.filter(run=run, revision=awaited).exists()
    history = [HistoryEntry.from_dict(h) for h in state.get("history") or ()]
    capabilities = DjangoRegistry().visible(OwnerAuthorizer(run.owner_id))
    return {
        "run": run.pk,
        "needs_plan": run.planner == "external" and awaited is not None and not submitted,
        "plan_submitted": submitted,
        "revision": revision,
        "goal": run.goal,
        "completion": run.completion,
        "reason_code": planning.get("reason_code") if awaited is not None else None,
        "reason": planning.get("reason", "") if awaited is not None else "",
        "validation_errors": list(planning.get("validation_errors") or []) if awaited is not None else [],
        "previous_plan": _previous_plan(state, planning),
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


def _previous_plan(state: dict[str, Any], planning: dict[str, Any]) -> list[dict[str, Any]]:
    """The rejected plan being corrected, else the last accepted plan (as the controller tells any planner)."""
    if planning.get("reason_code") == ReplanReason.PLAN_REJECTED.value:
        raw = planning.get("rejected_plan")
        raw = raw.get("steps") if isinstance(raw, dict) else raw
        return [x for x in raw if isinstance(x, dict)] if isinstance(raw, list) else []
    return [p["step"] for p in state.get("steps") or ()]
