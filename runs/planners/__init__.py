"""Planners a run can use. Each only proposes; the runtime validates and decides."""
from __future__ import annotations

from runs.runtime.planners import ScriptedPlanner

PLANNER_HELP = {
    "scripted": "A fixed list of plans (planner_config: {\"plans\": [...]}) — tests and scenarios.",
    "rules": "Deterministic demo planner for the bundled capabilities: no model needed.",
}


def planner_for(run):
    """Build the planner a run was started with."""
    if run.planner == "scripted":
        return ScriptedPlanner(run.planner_config.get("plans", []))
    if run.planner == "rules":
        from runs.planners.rules import RulesPlanner

        return RulesPlanner()
    raise ValueError(f"planner {run.planner!r} is not available")


def validate_planner_config(planner: str, config: dict) -> dict[str, str]:
    """Field errors for a planner's settings; empty when fine."""
    if planner == "scripted":
        plans = config.get("plans")
        if not isinstance(plans, list) or not plans:
            return {"planner_config": "The scripted planner needs planner_config.plans: a non-empty list of plans."}
    elif planner not in PLANNER_HELP:
        return {"planner": f"Unknown planner {planner!r}; choose one of {', '.join(sorted(PLANNER_HELP))}."}
    return {}
