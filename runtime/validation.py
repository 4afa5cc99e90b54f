"""Plan validation against the registry, the budgets and the owner's permissions.

Every error is listed, not just the first: the planner gets one chance to correct
the plan and needs to see everything that is wrong with it.
"""
from __future__ import annotations

from typing import Any

from . import schemas
from .budgets import Budgets
from .capability import CapabilitySpec
from .plan import Plan, PlanError
from .ports import Authorizer, CapabilityRegistry
from .signatures import canonical_json
from .storable import NON_FINITE, UNSTORABLE, json_unstorable, non_finite

# Validation errors are PlanErrors (code, message, step_id), the same type parse errors use.
ValidationError = PlanError


class ErrorCodes:
    UNKNOWN_CAPABILITY = "unknown_capability"
    DISABLED_CAPABILITY = "disabled_capability"
    INVALID_ARGUMENTS = "invalid_arguments"
    ARGUMENTS_TOO_LARGE = "arguments_too_large"
    INVALID_SCHEMA = "invalid_schema"
    UNKNOWN_DEPENDENCY = "unknown_dependency"
    CYCLIC_DEPENDENCY = "cyclic_dependency"
    TOO_MANY_STEPS = "too_many_steps"
    TOO_DEEP = "too_deep"
    PERMISSION_DENIED = "permission_denied"


def validate_plan(plan: Plan, registry: CapabilityRegistry, budgets: Budgets,
                  authorizer: Authorizer) -> tuple[PlanError, ...]:
    errors: list[PlanError] = []
    if len(plan.steps) > budgets.max_plan_steps:
        errors.append(PlanError(ErrorCodes.TOO_MANY_STEPS,
                                f"{len(plan.steps)} steps exceed the limit of {budgets.max_plan_steps}"))
    for step in plan.steps:
        spec = registry.get(step.capability)
        if spec is None:
            errors.append(PlanError(ErrorCodes.UNKNOWN_CAPABILITY, f"no registered capability {step.capability!r}",
                                    step.id))
            continue
        if not spec.enabled:
            errors.append(PlanError(ErrorCodes.DISABLED_CAPABILITY, f"capability {spec.name!r} is disabled", step.id))
        errors.extend(argument_errors(spec, step.arguments, step.id))
        if spec.changes_state and spec.permission and not authorizer.permits(spec.permission):
            errors.append(PlanError(ErrorCodes.PERMISSION_DENIED,
                                    f"{spec.name!r} has side effects and needs permission {spec.permission!r}, "
                                    "which the run's owner (or the plan's proposer) does not have", step.id))
    errors.extend(dependency_errors(plan, budgets))
    return tuple(errors)


def argument_errors(spec: CapabilitySpec, arguments: Any, step_id: str | None = None) -> list[PlanError]:
    return argument_problems(spec.schema, arguments, spec.max_argument_bytes, step_id)


def argument_problems(schema: dict[str, Any] | None, arguments: Any, max_bytes: int | None,
                      step_id: str | None = None) -> list[PlanError]:
    """The one argument check, all problems listed: asked of a plan's steps, by every executor
    before anything is sent, and by Try it."""
    if not isinstance(arguments, dict):
        return [PlanError(ErrorCodes.INVALID_ARGUMENTS, "arguments must be a JSON object", step_id)]
    errors: list[PlanError] = []
    text = canonical_json(arguments)
    size = len(text.encode("utf-8", "surrogatepass"))   # a lone surrogate is refused below, not an error here
    if max_bytes is not None and size > max_bytes:
        errors.append(PlanError(ErrorCodes.ARGUMENTS_TOO_LARGE,
                                f"arguments are {size} bytes, over the limit of {max_bytes}", step_id))
    if json_unstorable(text):
        errors.append(PlanError(ErrorCodes.INVALID_ARGUMENTS, f"arguments: {UNSTORABLE}", step_id))
    if ("NaN" in text or "Infinity" in text) and non_finite(arguments):
        errors.append(PlanError(ErrorCodes.INVALID_ARGUMENTS, f"arguments: {NON_FINITE}", step_id))
    for where, message in schemas.errors(schema, arguments):
        if where == "schema":
            errors.append(PlanError(ErrorCodes.INVALID_SCHEMA, message, step_id))
        else:
            errors.append(PlanError(ErrorCodes.INVALID_ARGUMENTS, f"{where or '(root)'}: {message}", step_id))
    return errors


def dependency_errors(plan: Plan, budgets: Budgets) -> list[PlanError]:
    errors: list[PlanError] = []
    ids = {s.id for s in plan.steps}
    deps = {s.id: tuple(d for d in s.depends_on if d in ids) for s in plan.steps}
    for step in plan.steps:
        for dep in step.depends_on:
            if dep not in ids:
                errors.append(PlanError(ErrorCodes.UNKNOWN_DEPENDENCY, f"depends on unknown step {dep!r}", step.id))
    if len(plan.steps) > 500:
        # Already rejected as too many steps; a graph walk this large adds nothing but recursion depth.
        return errors
    cycles = find_cycles(deps)
    for cycle in cycles:
        errors.append(PlanError(ErrorCodes.CYCLIC_DEPENDENCY, "dependency cycle: " + " -> ".join(cycle), cycle[0]))
    if not cycles:
        depth = plan_depth(deps)
        if depth > budgets.max_plan_depth:
            errors.append(PlanError(ErrorCodes.TOO_DEEP, f"the longest dependency chain has {depth} steps, "
                                                         f"over the limit of {budgets.max_plan_depth}"))
    return errors


def find_cycles(deps: dict[str, tuple[str, ...]]) -> list[list[str]]:
    """Each cycle once, as a path that ends where it starts (["s1", "s2", "s1"])."""
    cycles: list[list[str]] = []
    seen_cycles: set[frozenset[str]] = set()
    state: dict[str, int] = {}  # 1 visiting, 2 done

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        path.append(node)
        for dep in deps.get(node, ()):
            if state.get(dep) == 1:
                cycle = path[path.index(dep):] + [dep]
                members = frozenset(cycle)
                if members not in seen_cycles:
                    seen_cycles.add(members)
                    cycles.append(cycle)
            elif dep not in state:
                visit(dep, path)
        path.pop()
        state[node] = 2

    for node in deps:
        if node not in state:
            visit(node, [])
    return cycles


def plan_depth(deps: dict[str, tuple[str, ...]]) -> int:
    """Length, in steps, of the longest depends_on chain (an acyclic graph)."""
    depth: dict[str, int] = {}

    def of(node: str) -> int:
        if node not in depth:
            depth[node] = 1 + max((of(d) for d in deps.get(node, ())), default=0)
        return depth[node]

    return max((of(n) for n in deps), default=0)
