"""What the controller tells a planner, and what a planner answers."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .capability import CapabilitySpec
from .completion import CompletionCriteria
from .history import HistoryEntry
from .plan import PlanError


@dataclass(frozen=True)
class PlanningRequest:
    run_id: str
    goal: str
    completion: CompletionCriteria | None
    capabilities: tuple[CapabilitySpec, ...]
    # Recent attempts (capability, arguments, observation), oldest first.
    history: tuple[HistoryEntry, ...]
    # Steps (as dicts) of the last accepted plan, or of the rejected plan being corrected.
    previous_plan: tuple[dict[str, Any], ...]
    # The number the proposed plan will get: 1 for the first plan. A stateless planner
    # (ScriptedPlanner) uses it to pick its answer, so resumed runs stay deterministic.
    revision: int
    reason_code: str | None = None   # None for the first plan
    reason: str = ""
    validation_errors: tuple[PlanError, ...] = ()
    # When the run's deadline falls, in the controller clock's seconds, and how much of
    # it was left when the request was made: a planner that calls out (an LLM endpoint)
    # must not wait or retry past it. None: no deadline known (a hand-built request).
    deadline_at: float | None = None
    remaining_s: float | None = None


@dataclass(frozen=True)
class PlanProposal:
    plan: Any                     # a list of step dicts, or {"steps": [...], ...}: parsed by plan.parse_plan
    tokens: int = 0
    cost: float = 0.0
    reason_code: str | None = None
    reason: str = ""
    raw_output: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    # The planner's own account of why its answer is not a usable plan (unparsable model
    # output, endpoint unavailable). When set, the runtime rejects the answer with exactly
    # these errors, so the planner is told (once) and the stop detail says why.
    errors: tuple[PlanError, ...] = ()
    # "Nothing more to propose", with the tokens and cost it took to say so. The same as
    # returning None (the run stops stalled), but the usage still counts.
    no_further_plan: bool = False


@dataclass(frozen=True)
class PlannerCallCeiling:
    """The most one planner call may spend (its request's prompt and max_tokens, at the model's price).

    A call whose worker is lost before the answer is known is counted at this, marked as an estimate."""

    tokens: int
    cost: float


@dataclass(frozen=True)
class PlanNotReady:
    """The planner has no answer YET (an external agent has not submitted this revision).

    Returned instead of a PlanProposal: the pass records and counts nothing and the run
    waits (wait_s None) until whoever delivers the plan advances it again. The deadline
    still applies: the next pass, or the overdue sweep, stops the run when it passes.
    """

    detail: str = ""


@dataclass(frozen=True)
class SessionEnded:
    """The agent will propose nothing more because its session ended (a gateway client closed
    its MCP session, or it went idle): the run stops `session_ended` with this detail."""

    detail: str = ""
