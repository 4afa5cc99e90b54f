"""The gateway planner: an MCP client's tools/call is a one-step plan (gateway/).

The gateway stores each call as the plan for the revision the run waits for (a
PlanSubmission, as the external planner's agent does through the API), so the call
goes through the same parsing, validation, approval, budgets and stop reasons as any
plan. When the client's session ends the gateway stores "no further plan" with the
reason: for this planner that means the session ended, not that the agent gave up,
so the run stops `session_ended` instead of `stalled`.
"""
from __future__ import annotations

from runs.planners.external import ExternalPlanner
from runtime.planning import PlanningRequest, PlanNotReady, PlanProposal, SessionEnded


class GatewayPlanner(ExternalPlanner):
    def propose(self, request: PlanningRequest) -> PlanProposal | PlanNotReady | SessionEnded:
        proposal = super().propose(request)
        if isinstance(proposal, PlanProposal) and proposal.no_further_plan:
            return SessionEnded(proposal.reason)
        if isinstance(proposal, PlanNotReady):
            return PlanNotReady(f"waiting for the MCP client's next tools/call (revision {request.revision})")
        return proposal
