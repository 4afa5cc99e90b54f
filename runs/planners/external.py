"""The external planner: an agent running elsewhere submits each plan through the API.

The agent (LangGraph, the OpenAI Agents SDK, its own code) reads what the runtime
needs (`planning_needs`, served at GET /api/runs/<id>/planning/), and answers with
POST /api/runs/<id>/plans/ (`runs.services.plan_submit`). The controller asks this
planner like any other; without a submission for the revision it waits for, the
answer is PlanNotReady and the run simply waits (the deadline still applies). A
submitted plan then goes through exactly the same parsing, validation, approval,
budgets and stop reasons as a plan from any other planner.
"""
from __future__ import annotations

import json
from typing import Any

from runs.models import PlanSubmission, Run
from runs.planners.llm import observation_for_planner
from runs.runtime.history import HistoryEntry
from runs.runtime.planning import PlanNotReady, PlanningRequest, PlanProposal
from runs.runtime.stop import ReplanReason


class ExternalPlanner:
    def __init__(self, run_id: int) -> None:
        self.run_id = run_id

    def propose(self, request: PlanningRequest) -> PlanProposal | PlanNotReady:
        submission = PlanSubmission.objects.filter(run_id=self.run_id, revision=request.revision).first()
        if submission is None:
            return PlanNotReady(f"waiting for the external agent's plan for revision {request.revision}")
        raw_output = json.dumps(submission_body(submission), sort_keys=True, default=str)
        if submission.no_further_plan:
            return PlanProposal(plan=None, tokens=submission.tokens, cost=submission.cost, reason=submission.reason,
                                raw_output=raw_output, no_further_plan=True)
        return PlanProposal(plan=submission.plan, tokens=submission.tokens, cost=submission.cost,
                            reason_code=submission.reason_code or None, reason=submission.reason,
                            raw_output=raw_output)


def submission_body(submission: PlanSubmission) -> dict[str, Any]:
    """What the agent sent, as recorded on the revision (planner_output)."""
    body: dict[str, Any] = {"revision": submission.revision, "tokens": submission.tokens, "cost": submission.cost,
                            "submitted_by": submission.submitted_by.get_username()}
    if submission.no_further_plan:
        body["no_further_plan"] = True
    else:
        body["steps"] = submission.plan
    if submission.reason_code:
        body["reason_code"] = submission.reason_code
    if submission.reason:
        body["reason"] = submission.reason
    return body


def awaited_revision(run: Run) -> int | None:
    """The revision number the run waits for a plan for, or None when it needs none now."""
    state = run.state or {}
    if run.is_finished or state.get("planning") is None:
        return None
    return int((state.get("usage") or {}).get("plans", 0)) + 1


def planning_needs(run: Run) -> dict[str, Any]:
    """Everything an external agent needs to propose the next plan (a read: no change)."""
    from runs.engine import DjangoRegistry, OwnerAuthorizer

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
