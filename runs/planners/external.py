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
from collections.abc import Callable
from typing import Any

from runs.models import PlanSubmission, Run
from runtime.planning import PlanningRequest, PlanNotReady, PlanProposal

# Planners whose plans come from an agent outside (the API, the MCP gateway): their runs wait
# for the agent, not a worker, and a plan's arrival wakes them.
AGENT_PLANNERS = ("external", "gateway")


class ExternalPlanner:
    def __init__(self, run_id: int, *, on_proposed: Callable[[int], None] | None = None) -> None:
        self.run_id = run_id
        self.on_proposed = on_proposed

    def propose(self, request: PlanningRequest) -> PlanProposal | PlanNotReady:
        submission = (PlanSubmission.objects.select_related("submitted_by")   # its name goes on the revision
                      .filter(run_id=self.run_id, revision=request.revision).first())
        if submission is None:
            return PlanNotReady(f"waiting for the external agent's plan for revision {request.revision}")
        if self.on_proposed is not None:  # before the plan is validated: with its proposer's permissions too
            self.on_proposed(submission.submitted_by_id)
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


def next_plan_revision(run: Run) -> int:
    """The first revision the run will ask a plan for that has none yet: the awaited one, or, while
    a plan is being carried out (a call in flight, an approval pending), the one after it."""
    plans = int(((run.state or {}).get("usage") or {}).get("plans", 0))
    submitted = run.plan_submissions.order_by("-revision").values_list("revision", flat=True).first() or 0
    return max(plans, submitted) + 1
