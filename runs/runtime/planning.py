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


@dataclass(frozen=True)
class PlanProposal:
    plan: Any                     # a list of step dicts, or {"steps": [...], ...}: parsed by plan.parse_plan
    tokens: int = 0
    cost: float = 0.0
    reason_code: str | None = None
    reason: str = ""
    raw_output: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
