"""A planning pass: ask the planner, then take in its answer (count it, validate it, record
it, and install it, reject it or put it before an operator)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import budgets as B
from .approval_gate import request_approval
from .approvals import ApprovalKind, ApprovalRequest
from .capability import CapabilitySpec
from .events import PlanProposed
from .pass_context import Pass
from .plan import Step, parse_plan, step_changes
from .planner_calls import ask
from .planning import PlanningRequest, PlanNotReady, PlanProposal, SessionEnded
from .ports import CapabilityRegistry
from .records import replace
from .signatures import action_signature, plan_hash, signature_text
from .state import PlanAwaitingApproval, PlanningNeed, RunState, StepProgress
from .stop import ReplanReason, StallKind, StopKind
from .validation import validate_plan


@dataclass(frozen=True)
class _Asked:
    """This pass's question to the planner: why it was asked, what it could see, and when."""

    need: PlanningNeed
    visible: tuple[CapabilitySpec, ...]
    at: float


def ask_planner(p: Pass, now: float) -> None:
    s, need = p.state, p.state.planning
    assert need is not None  # the planner is asked only when the run needs a plan
    is_revision = s.usage.plans > 0
    if is_revision and not s.allow_replan:
        if need.reason_code == ReplanReason.PLAN_REJECTED:
            return p.stop(StopKind.PLAN_REJECTED, None, f"direct mode does not replan ({need.reason})",
                          need.trigger_attempt_id)
        return p.stall(StallKind.PLANNER_EXHAUSTED, f"direct mode does not replan ({need.reason})",
                       need.trigger_attempt_id)
    budget = B.exhausted_before_planning(s.budgets, s.usage, started_at=s.started_at, now=now, revision=is_revision)
    if budget:
        return p.stop(StopKind.BUDGET_EXHAUSTED, budget,
                      f"no {budget} budget left to ask the planner ({need.reason})", need.trigger_attempt_id)
    visible = tuple(p.ports.registry.visible(p.ports.authorizer))
    asked = _Asked(need, visible, at=p.ports.clock.now())
    proposal = ask(p, _planning_request(s, asked, now))
    if isinstance(proposal, PlanNotReady):
        # Nothing happened yet (an external agent is still thinking): count nothing,
        # emit nothing, and wait until the plan's arrival advances the run again.
        p.wait_s = None
        return
    if isinstance(proposal, SessionEnded):
        return p.stop(StopKind.SESSION_ENDED, None, proposal.detail or "the agent's session ended",
                      need.trigger_attempt_id)
    if proposal is None or proposal.no_further_plan:
        tokens, cost = (proposal.tokens, proposal.cost) if proposal is not None else (0, 0.0)
        p.state = replace(s, usage=s.usage.counted_plan(tokens=tokens, cost=cost, received=False))
        if need.reason_code == ReplanReason.PLAN_REJECTED:
            # A rejected plan the planner cannot correct: the plan was rejected, nothing stalled.
            return p.stop(StopKind.PLAN_REJECTED, None,
                          f"{need.reason}; the planner has no correction", need.trigger_attempt_id)
        detail = "the planner has no further plan" if is_revision else "the planner proposed no plan"
        why = f"{detail} after: {need.reason}" if is_revision else detail
        return p.stall(StallKind.PLANNER_EXHAUSTED, why, need.trigger_attempt_id)
    _receive_plan(p, asked, proposal)


def _planning_request(s: RunState, asked: _Asked, now: float) -> PlanningRequest:
    need = asked.need
    previous = tuple(pr.step.to_dict() for pr in s.steps)
    if need.reason_code == ReplanReason.PLAN_REJECTED:
        raw = need.rejected_plan.get("steps") if isinstance(need.rejected_plan, dict) else need.rejected_plan
        previous = tuple(x for x in raw if isinstance(x, dict)) if isinstance(raw, list) else ()
    return PlanningRequest(run_id=s.run_id, goal=s.goal, completion=s.completion, capabilities=asked.visible,
                           history=s.history, previous_plan=previous, revision=s.usage.plans + 1,
                           reason_code=need.reason_code, reason=need.reason,
                           validation_errors=need.validation_errors,
                           deadline_at=s.budgets.deadline_at(s.started_at),
                           remaining_s=B.remaining_time(s.budgets, s.started_at, now))


def _receive_plan(p: Pass, asked: _Asked, proposal: PlanProposal) -> None:
    s, need = p.state, asked.need
    parsed = parse_plan(proposal.plan)
    tokens, cost = (proposal.tokens or parsed.tokens), (proposal.cost or parsed.cost)
    usage = s.usage.counted_plan(tokens=tokens, cost=cost, received=True)
    revision = usage.plans
    if proposal.errors:
        errors = tuple(proposal.errors)
    else:
        errors = parsed.errors + validate_plan(parsed.plan, p.ports.registry, s.budgets, p.ports.authorizer)
    reason_code = need.reason_code
    # The planner may say more precisely why it changed the plan, but not relabel a rejection.
    if (reason_code not in (None, ReplanReason.PLAN_REJECTED)
            and proposal.reason_code in set(ReplanReason) - {ReplanReason.PLAN_REJECTED}):
        reason_code = proposal.reason_code
    steps = parsed.plan.steps
    accepted = not errors
    needs_approval = accepted and s.require_plan_approval and (
        s.revision == 0 or _adds_side_effects(p.ports.registry, s.steps, steps))
    step_dicts = tuple(st.to_dict() for st in steps)
    p.state = replace(s, usage=usage)
    proposed = PlanProposed(
        revision=revision, steps=step_dicts, accepted=accepted, validation_errors=errors,
        reason_code=reason_code, reason=proposal.reason or need.reason,
        triggering_attempt_id=need.trigger_attempt_id,
        changes=plan_changes(tuple(pr.step for pr in s.steps), steps) if s.steps else {},
        tokens=tokens, cost=cost, planner_output=proposal.raw_output,
        capabilities_seen=tuple(c.name for c in asked.visible), needs_plan_approval=needs_approval,
        plan_hash=plan_hash(list(step_dicts)), started_at=asked.at, ended_at=p.ports.clock.now())
    p.emit(proposed)
    exceeded = B.exceeded_after_planning(s.budgets, usage)
    if exceeded:
        return p.stop(StopKind.BUDGET_EXHAUSTED, exceeded,
                      f"planning used {usage.tokens} tokens / cost {usage.cost:g}, over the budget",
                      need.trigger_attempt_id)
    if not accepted:
        return _reject_plan(p, proposed, proposal.plan)
    p.state = replace(p.state, consecutive_rejections=0, planning=None)
    if needs_approval:
        p.state = replace(p.state, plan_awaiting_approval=PlanAwaitingApproval(revision, steps, reason_code))
        request = ApprovalRequest(kind=ApprovalKind.PLAN, run_id=s.run_id, revision=revision,
                                  plan_hash=plan_hash(list(step_dicts)))
        return request_approval(p, request, steps=step_dicts)
    p.install_plan(revision, steps)


def _reject_plan(p: Pass, proposed: PlanProposed, raw_plan: Any) -> None:
    """A plan that failed validation, as the run recorded it: the planner may correct it
    once; a second rejection in a row stops the run."""
    rejections = p.state.consecutive_rejections + 1
    summary = "; ".join(str(e) for e in proposed.validation_errors)
    if rejections >= 2:
        return p.stop(StopKind.PLAN_REJECTED, None, f"revision {proposed.revision} was rejected again: {summary}",
                      proposed.triggering_attempt_id)
    p.state = replace(p.state, consecutive_rejections=rejections, planning=PlanningNeed(
        reason_code=ReplanReason.PLAN_REJECTED.value, reason=f"revision {proposed.revision} was rejected: {summary}",
        trigger_attempt_id=proposed.triggering_attempt_id, validation_errors=proposed.validation_errors,
        rejected_plan=raw_plan))


def _adds_side_effects(registry: CapabilityRegistry, current: tuple[StepProgress, ...],
                       proposed: tuple[Step, ...]) -> bool:
    """Does the proposed plan make a state-changing call the current plan does not?"""
    def side_effecting(step_list: Any) -> set[str]:
        found = set()
        for step in step_list:
            spec = registry.get(step.capability)
            if spec is not None and spec.changes_state:
                found.add(signature_text(action_signature(step.capability, step.arguments)))
        return found
    return bool(side_effecting(proposed) - side_effecting(pr.step for pr in current))


def plan_changes(previous: tuple[Step, ...], new: tuple[Step, ...]) -> dict[str, Any]:
    """What a revision changed (step_changes) and the same in one line, as the run records it."""
    changes = step_changes({s.id: s.to_dict() for s in previous}, {s.id: s.to_dict() for s in new})
    added, removed, changed = changes["added"], changes["removed"], changes["changed"]
    parts = ([f"added {', '.join(added)}"] if added else []) + ([f"removed {', '.join(removed)}"] if removed else []) \
        + ([f"changed {'; '.join(changed)}"] if changed else [])
    return {"added": added, "removed": removed, "changed": changed, "summary": "; ".join(parts) or "no change"}
