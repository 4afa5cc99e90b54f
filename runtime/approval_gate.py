"""The approval gate: a pass asks for an operator's approval of a plan or a step, and a
later pass takes the decision (or the request's expiry) before anything else happens."""
from __future__ import annotations

from typing import Any

from .approvals import ApprovalKind, ApprovalRequest
from .events import ApprovalDecided, ApprovalRequested
from .pass_context import Pass
from .records import replace
from .stop import RunStatus, StopKind


def take_approval(p: Pass) -> bool:
    """True when the pending approval was granted and the pass may go on."""
    request = p.state.pending_approval
    assert request is not None  # the pass takes the gate only while a request is pending
    decision = p.ports.approvals.decision_for(request)
    if decision is None:
        now = p.ports.clock.now()
        if request.expires_at is not None and now >= request.expires_at:
            p.stop(StopKind.APPROVAL_EXPIRED, None, expired_detail(request))
            return False
        # Nothing to do until a decision arrives or the request expires; whoever
        # drives the run (scheduler sweep, scenario runner) wakes it for either.
        p.wait_s = None
        return False
    p.emit(ApprovalDecided(request, decision))
    if not decision.approved:
        by = f" by {decision.decided_by}" if decision.decided_by else ""
        p.stop(StopKind.APPROVAL_REJECTED, None, decision.comment or f"{request.kind} approval rejected{by}")
        return False
    if request.kind == ApprovalKind.PLAN:
        waiting = p.state.plan_awaiting_approval
        assert waiting is not None  # a plan request holds its plan until it is decided
        p.state = replace(p.state, plan_awaiting_approval=None)
        p.install_plan(waiting.revision, waiting.steps)
    else:
        assert request.step_id is not None  # a step request names its step
        progress = p.state.step_progress(request.step_id)
        assert progress is not None
        p.state = p.state.with_step(replace(progress, approved_arguments_hash=request.arguments_hash))
    p.state = replace(p.state, pending_approval=None)
    return True


def request_approval(p: Pass, request: ApprovalRequest, **display: Any) -> None:
    s, now = p.state, p.ports.clock.now()
    expiry = s.budgets.deadline_at(s.started_at)
    if p.ports.approval_ttl_s is not None:
        expiry = min(expiry, now + p.ports.approval_ttl_s)
    request = replace(request, expires_at=expiry)
    p.state = replace(p.state, pending_approval=request)
    p.set_status(RunStatus.AWAITING_APPROVAL)
    p.emit(ApprovalRequested(request, **display))
    # Advance once more: an approval that is already decided is taken at once,
    # an undecided one makes that pass return wait_s None.
    p.wait_s = 0.0


def expired_detail(request: ApprovalRequest) -> str:
    what = f"step {request.step_id} ({request.capability})" if request.kind == ApprovalKind.STEP else \
        f"plan revision {request.revision}"
    return f"the approval request for {what} expired undecided"
