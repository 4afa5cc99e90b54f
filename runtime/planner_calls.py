"""Planner calls that spend tokens, written ahead like side-effecting capability calls.

A calling planner (ports.CallingPlanner: an LLM endpoint) is asked only after the
intent log has made a PlannerCallIntent durable: the revision asked for, when, and
the most the call may spend. Its answer's figures are recorded as soon as it comes
back, then counted with the pass that takes the plan in. A worker lost in between
leaves the intent; whoever resumes the run counts it once, at the start of its
first pass (before a cancel, a deadline or a budget can end the run without it):
at the answer's figures when they were recorded, else at the call's ceiling,
marked as an estimate in the usage and the trace. Then the planner is asked again,
a new call, under the tokens and cost budgets like any other.
"""
from __future__ import annotations

from .events import PlannerCallEnded
from .intents import PlannerCallIntent
from .pass_context import Pass
from .planning import PlanningRequest, PlanNotReady, PlanProposal, SessionEnded
from .ports import CallingPlanner
from .records import replace


def ask(p: Pass, request: PlanningRequest) -> PlanProposal | PlanNotReady | SessionEnded | None:
    """The planner's answer to `request`; a calling planner's call is written ahead and accounted for."""
    planner = p.ports.planner
    if not isinstance(planner, CallingPlanner):
        return planner.propose(request)   # nothing spent elsewhere (scripted, rules, an external agent)
    ceiling = planner.ceiling(request)
    intent = PlannerCallIntent(call_id=p.ports.ids.new_id(), revision=request.revision,
                               started_at=p.ports.clock.now(), max_tokens=ceiling.tokens, max_cost=ceiling.cost)
    p.ports.intents.begin_planner_call(intent)
    proposal = planner.propose(request)
    tokens, cost = (proposal.tokens, proposal.cost) if isinstance(proposal, PlanProposal) else (0, 0.0)
    # Durable before the pass is: a worker lost from here on leaves the real figures, not the ceiling.
    p.ports.intents.planner_call_answered(intent, tokens, cost)
    # Counted where the plan is taken in (plan_intake); this records that the intent is closed.
    p.emit(PlannerCallEnded(intent.call_id, intent.revision, intent.started_at, p.ports.clock.now(), tokens, cost))
    return proposal


def settle_lost_calls(p: Pass) -> None:
    """Count, once, each planner call lost workers made (two when the worker that found one was lost too
    before counting it): each spent what its answer said, or at most its ceiling."""
    while (lost := p.ports.intents.interrupted_planner_call()) is not None:
        _count_lost(p, lost)


def _count_lost(p: Pass, lost: PlannerCallIntent) -> None:
    answered = lost.answered_tokens is not None
    tokens = lost.answered_tokens if lost.answered_tokens is not None else lost.max_tokens
    cost = (lost.answered_cost or 0.0) if answered else lost.max_cost
    p.state = replace(p.state, usage=p.state.usage.counted_lost_planner_call(tokens=tokens, cost=cost,
                                                                             estimated=not answered))
    p.emit(PlannerCallEnded(lost.call_id, lost.revision, lost.started_at, p.ports.clock.now(), tokens, cost,
                            lost=True, estimated=not answered))
