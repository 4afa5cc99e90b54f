"""Planners that need no model: scripted plans (a production planner type too) and
the single-step "direct" baseline the evaluation compares planning against."""
from __future__ import annotations

import json
from typing import Any

from ..planning import PlanningRequest, PlanProposal


class ScriptedPlanner:
    """plans[0] is the first plan, each replan takes the next one; None when they run out.

    Stateless: the answer depends only on request.revision, so a run resumed from a
    checkpoint in another process gets the same plans.
    """

    def __init__(self, plans: list[Any]) -> None:
        self.plans = list(plans)

    def propose(self, request: PlanningRequest) -> PlanProposal | None:
        index = request.revision - 1
        if index >= len(self.plans):
            return None
        raw = self.plans[index]
        meta = raw if isinstance(raw, dict) else {}
        return PlanProposal(plan=raw, tokens=_int(meta.get("tokens")), cost=_float(meta.get("cost")),
                            reason_code=meta.get("reason_code"), reason=str(meta.get("reason") or ""),
                            raw_output=json.dumps(raw, sort_keys=True, default=str))


class DirectPlanner:
    """One single-step plan calling one capability; never a revision."""

    def __init__(self, capability: str, arguments: dict[str, Any], expected_outcome: str = "direct call") -> None:
        self.step = {"id": "s1", "capability": capability, "arguments": dict(arguments),
                     "expected_outcome": expected_outcome}

    def propose(self, request: PlanningRequest) -> PlanProposal | None:
        if request.revision != 1:
            return None
        return PlanProposal(plan=[self.step], raw_output=json.dumps([self.step], sort_keys=True))


def _int(value: Any) -> int:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0


def _float(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0
