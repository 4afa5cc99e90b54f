"""The typed plan a planner proposes: steps naming registered capabilities.

Parsing never raises on bad input: every problem becomes a PlanError so the
planner can be told all of them at once.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class PlanError:
    code: str
    message: str
    step_id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "step_id": self.step_id}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PlanError:
        return cls(code=data["code"], message=data["message"], step_id=data.get("step_id"))

    def __str__(self) -> str:
        where = f"{self.step_id}: " if self.step_id else ""
        return f"{where}{self.code}: {self.message}"


@dataclass(frozen=True)
class Step:
    id: str
    capability: str
    arguments: dict[str, Any] = field(default_factory=dict)
    expected_outcome: str = ""
    depends_on: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "capability": self.capability, "arguments": self.arguments,
                "expected_outcome": self.expected_outcome, "depends_on": list(self.depends_on)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Step:
        return cls(id=data["id"], capability=data["capability"], arguments=dict(data.get("arguments") or {}),
                   expected_outcome=data.get("expected_outcome", ""),
                   depends_on=tuple(data.get("depends_on") or ()))


@dataclass(frozen=True)
class Plan:
    steps: tuple[Step, ...] = ()

    def step(self, step_id: str) -> Step | None:
        return next((s for s in self.steps if s.id == step_id), None)


# The order a changed step's fields are named in; any other key follows, by name.
STEP_FIELDS = ("capability", "arguments", "depends_on", "expected_outcome")


def step_changes(before: Mapping[str, Mapping[str, Any]],
                 after: Mapping[str, Mapping[str, Any]]) -> dict[str, list[str]]:
    """What a revision changed, by step id, in words an operator can read.

    Each side maps a step id to the step as a dict: `Step.to_dict()` in the runtime,
    a stored plan's step on the trace page (which may hold anything, hence the '?').
    """
    added = [f"{key} ({step.get('capability', '?')})" for key, step in after.items() if key not in before]
    removed = [f"{key} ({step.get('capability', '?')})" for key, step in before.items() if key not in after]
    changed = []
    for key, step in after.items():
        old = before.get(key)
        if old is None or old == step:
            continue
        names = sorted(set(old) | set(step), key=lambda f: (STEP_FIELDS.index(f) if f in STEP_FIELDS
                                                           else len(STEP_FIELDS), f))
        changed.append(f"{key}: {', '.join(f for f in names if old.get(f) != step.get(f))}")
    return {"added": added, "removed": removed, "changed": changed}


@dataclass(frozen=True)
class ParsedPlan:
    plan: Plan
    errors: tuple[PlanError, ...] = ()
    tokens: int = 0
    cost: float = 0.0


def parse_plan(raw: Any) -> ParsedPlan:
    """Accept a list of step dicts, or {"steps": [...], "tokens": N, "cost": X}."""
    errors: list[PlanError] = []
    tokens, cost = 0, 0.0
    if isinstance(raw, dict):
        tokens = _number(raw.get("tokens", 0), int, "tokens", errors)
        cost = _number(raw.get("cost", 0.0), float, "cost", errors)
        raw = raw.get("steps")
    if not isinstance(raw, list):
        errors.append(PlanError("malformed_plan", "a plan is a list of steps or an object with a 'steps' list"))
        return ParsedPlan(Plan(()), tuple(errors), tokens, cost)
    steps: list[Step] = []
    seen: set[str] = set()
    for index, item in enumerate(raw):
        step = _parse_step(item, index, errors)
        if step is None:
            continue
        if step.id in seen:
            errors.append(PlanError("duplicate_step_id", f"step id {step.id!r} is used more than once", step.id))
            continue
        seen.add(step.id)
        steps.append(step)
    if not raw:
        errors.append(PlanError("empty_plan", "the plan has no steps"))
    return ParsedPlan(Plan(tuple(steps)), tuple(errors), tokens, cost)


def _number(value: Any, kind: type, name: str, errors: list[PlanError]) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        errors.append(PlanError("malformed_plan", f"{name} must be a non-negative number"))
        return kind(0)
    return kind(value)


def _parse_step(item: Any, index: int, errors: list[PlanError]) -> Step | None:
    default_id = f"s{index + 1}"
    if not isinstance(item, dict):
        errors.append(PlanError("malformed_step", f"step {index + 1} is not an object", default_id))
        return None
    step_id = item.get("id", default_id)
    before = len(errors)
    if not isinstance(step_id, str) or not step_id:
        errors.append(PlanError("malformed_step", "id must be a non-empty string", default_id))
        step_id = default_id
    capability = item.get("capability")
    if not isinstance(capability, str) or not capability:
        errors.append(PlanError("malformed_step", "capability must be a non-empty string", step_id))
    arguments = item.get("arguments", {})
    if not isinstance(arguments, dict):
        errors.append(PlanError("malformed_step", "arguments must be an object", step_id))
    expected = item.get("expected_outcome", "")
    if not isinstance(expected, str):
        errors.append(PlanError("malformed_step", "expected_outcome must be a string", step_id))
    depends_on = item.get("depends_on", [])
    if isinstance(depends_on, str):
        depends_on = [depends_on]
    if not isinstance(depends_on, list) or not all(isinstance(d, str) for d in depends_on):
        errors.append(PlanError("malformed_step", "depends_on must be a list of step ids", step_id))
    if len(errors) > before or not isinstance(capability, str):
        return None
    return Step(id=step_id, capability=capability, arguments=arguments, expected_outcome=expected,
                depends_on=tuple(depends_on))
