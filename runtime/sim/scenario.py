"""Scenario files: the real controller, a scripted planner, simulated capabilities,
a simulated clock. The format is a public contract (design.md "Scenario files"):
extend it only compatibly."""
from __future__ import annotations

import json
import math
import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..approvals import ApprovalDecision
from ..budgets import Budgets
from ..capability import CapabilitySpec, Kind, PollingPolicy, RetryPolicy, SideEffect
from ..completion import CompletionCriteria, completion_errors, until_condition
from ..controller import Controller, Transition
from ..events import ApprovalRequested, Event
from ..ids import RandomIds, SequentialIds
from ..observation import ErrorCode
from ..state import RunState
from .planners import DirectPlanner, ScriptedPlanner
from .simulation import (
    EXPIRE,
    ScriptedApprovals,
    SimulatedCapabilities,
    SimulatedClock,
    StaticAuthorizer,
    StaticRegistry,
)

EXPECT_FIELDS = ("status", "stop_reason", "tool_calls", "revisions", "retries", "approvals_requested",
                 "side_effects_committed", "tokens", "elapsed_s", "stall_kind")
TOP_FIELDS = {"name", "description", "goal", "completion", "budgets", "owner_permissions", "capabilities",
              "planner", "approvals", "expect", "direct", "seed", "require_plan_approval", "approval_ttl_s"}
CAPABILITY_FIELDS = {"name", "description", "side_effect", "schema", "max_argument_bytes", "timeout_s", "retry",
                     "requires_approval", "idempotent", "status_lookup", "permission", "polling", "responses",
                     "enabled", "version", "volatile_paths", "distinct_calls", "settle_s"}
# An approvals entry {"decision": "expire"}: nobody answers, and the request lapses.
APPROVAL_DECISIONS = ("approve", "reject", "expire")
RESPONSE_FIELDS = {"return", "state_changed", "raise", "http_status", "body", "headers", "latency_s",
                   "commit_then_timeout", "commit_late_s", "retry_after_s", "deduplicated"}
RAISABLE = tuple(c.value for c in ErrorCode if c is not ErrorCode.OUTCOME_UNKNOWN)
MODES = ("planning", "direct")
REGISTERED = "registered"


class ScenarioError(ValueError):
    """An invalid scenario file; `problems` lists every one of them."""

    what = "scenario"

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = source
        self.problems = list(problems)
        super().__init__(f"{source}: invalid {self.what}:\n" + "\n".join(f"  - {p}" for p in self.problems))


@dataclass(frozen=True)
class Scenario:
    name: str
    goal: str
    completion: CompletionCriteria | None
    budgets: Budgets
    owner_permissions: tuple[str, ...] | None
    capabilities: tuple[CapabilitySpec, ...]
    responses: dict[str, list[dict[str, Any]]]
    plans: tuple[Any, ...]
    approvals: tuple[ApprovalDecision | str, ...]   # EXPIRE: the request is left to expire
    expect: dict[str, Any]
    direct: dict[str, Any] | None = None
    seed: int = 0
    require_plan_approval: bool = False
    source: str = "<dict>"
    # "capabilities": "registered": the application's own registry and executors serve the
    # task (the evaluation runner wires them); the pure runtime can only simulate.
    registered: bool = False
    # The product's approval TTL by default (a day); the run's deadline caps it anyway.
    approval_ttl_s: float = 86_400.0


@dataclass
class ScenarioResult:
    name: str
    passed: bool
    failures: list[str]
    status: str
    stop_reason: str | None
    tool_calls: int
    revisions: int
    retries: int
    approvals_requested: int
    side_effects_committed: int
    tokens: int
    elapsed_s: float
    stall_kind: str | None = None
    mode: str = "planning"
    state: RunState | None = field(default=None, repr=False)
    events: list[Event] = field(default_factory=list, repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "passed": self.passed, "failures": list(self.failures), "status": self.status,
                "stop_reason": self.stop_reason, "tool_calls": self.tool_calls, "revisions": self.revisions,
                "retries": self.retries, "approvals_requested": self.approvals_requested,
                "side_effects_committed": self.side_effects_committed, "tokens": self.tokens,
                "elapsed_s": self.elapsed_s, "stall_kind": self.stall_kind}


# -- loading ----------------------------------------------------------------------------

def load_scenario(path_or_dict: str | Path | dict[str, Any]) -> Scenario:
    if isinstance(path_or_dict, dict):
        return _build(path_or_dict, "<dict>")
    source = str(path_or_dict)
    try:
        data = json.loads(Path(path_or_dict).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:   # ValueError: not JSON, or not UTF-8
        raise ScenarioError(source, [f"cannot read JSON: {exc}"]) from exc
    if not isinstance(data, dict):
        raise ScenarioError(source, ["a scenario is a JSON object"])
    return _build(data, source)


def _build(data: dict[str, Any], source: str) -> Scenario:
    problems: list[str] = []
    unknown = set(data) - TOP_FIELDS
    if unknown:
        problems.append(f"unknown fields: {', '.join(sorted(unknown))}")
    name = data.get("name")
    if not isinstance(name, str) or not name:
        problems.append("name must be a non-empty string")
    if not isinstance(data.get("goal", ""), str):
        problems.append("goal must be a string")
    completion = None
    if data.get("completion") is not None:
        errors = completion_errors(data["completion"])
        problems.extend(errors)
        if not errors:
            completion = CompletionCriteria.from_dict(data["completion"])
    budgets = Budgets()
    try:
        if not isinstance(data.get("budgets", {}), dict):
            raise ValueError("budgets must be an object")
        budgets = Budgets.from_dict(data.get("budgets"))
    except (ValueError, TypeError) as exc:
        problems.append(f"budgets: {exc}")
    permissions = data.get("owner_permissions")
    if permissions is not None and (not isinstance(permissions, list)
                                    or not all(isinstance(p, str) for p in permissions)):
        problems.append("owner_permissions must be a list of strings")
        permissions = None
    registered = data.get("capabilities") == REGISTERED
    specs, responses = ([], {}) if registered else _capabilities(data.get("capabilities"), problems)
    plans = _plans(data, problems)
    approvals = _approvals(data.get("approvals", []), problems)
    expect = data.get("expect", {})
    if not isinstance(expect, dict):
        problems.append("expect must be an object")
        expect = {}
    for key in sorted(set(expect) - set(EXPECT_FIELDS)):
        problems.append(f"expect.{key} is not one of {', '.join(EXPECT_FIELDS)}")
    direct = data.get("direct")
    if direct is not None and (not isinstance(direct, dict) or not isinstance(direct.get("capability"), str)
                               or not isinstance(direct.get("arguments", {}), dict)):
        problems.append("direct must be {\"capability\": name, \"arguments\": {...}}")
    if not isinstance(data.get("seed", 0), int):
        problems.append("seed must be an integer")
    if not isinstance(data.get("require_plan_approval", False), bool):
        problems.append("require_plan_approval must be true or false")
    ttl = data.get("approval_ttl_s", Scenario.approval_ttl_s)
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or ttl <= 0:
        problems.append("approval_ttl_s must be a positive number")
        ttl = Scenario.approval_ttl_s
    if problems or not isinstance(name, str):
        raise ScenarioError(source, problems)
    return Scenario(name=name, goal=data.get("goal", ""), completion=completion, budgets=budgets,
                    owner_permissions=None if permissions is None else tuple(permissions),
                    capabilities=tuple(specs), responses=responses, plans=tuple(plans), approvals=tuple(approvals),
                    expect=dict(expect), direct=direct, seed=int(data.get("seed", 0)),
                    require_plan_approval=bool(data.get("require_plan_approval", False)), source=source,
                    registered=registered, approval_ttl_s=float(ttl))


def _plans(data: dict[str, Any], problems: list[str]) -> list[Any]:
    planner = data.get("planner")
    if planner is None:
        if data.get("direct") is None:
            problems.append("planner is required (or direct, for a direct-only scenario)")
        return []
    if not isinstance(planner, dict) or not isinstance(planner.get("plans"), list):
        problems.append("planner must be {\"plans\": [...]}")
        return []
    return list(planner["plans"])


def _approvals(items: Any, problems: list[str]) -> list[ApprovalDecision | str]:
    if not isinstance(items, list):
        problems.append("approvals must be a list")
        return []
    decisions: list[ApprovalDecision | str] = []
    for i, item in enumerate(items):
        if not isinstance(item, dict) or item.get("decision") not in APPROVAL_DECISIONS:
            problems.append(f"approvals[{i}].decision must be \"approve\", \"reject\" or \"expire\"")
            continue
        if item["decision"] == "expire":
            decisions.append(EXPIRE)
            continue
        decisions.append(ApprovalDecision(item["decision"] == "approve", str(item.get("comment", "")),
                                          str(item.get("decided_by", "scenario"))))
    return decisions


def _capabilities(items: Any, problems: list[str]) -> tuple[list[CapabilitySpec], dict[str, list[dict[str, Any]]]]:
    if not isinstance(items, list):
        problems.append("capabilities must be a list")
        return [], {}
    specs, responses = [], {}
    for i, item in enumerate(items):
        where = f"capabilities[{i}]"
        if not isinstance(item, dict) or not isinstance(item.get("name"), str) or not item.get("name"):
            problems.append(f"{where} needs a name")
            continue
        where = f"capability {item['name']!r}"
        if item["name"] in responses:
            problems.append(f"{where} is defined twice")
            continue
        unknown = set(item) - CAPABILITY_FIELDS
        if unknown:
            problems.append(f"{where}: unknown fields {', '.join(sorted(unknown))}")
        try:
            specs.append(_spec(item))
        except (ValueError, TypeError, KeyError) as exc:
            problems.append(f"{where}: {exc}")
        responses[item["name"]] = _responses(item.get("responses", []), where, problems)
    return specs, responses


def _spec(item: dict[str, Any]) -> CapabilitySpec:
    defaults = CapabilitySpec(name=item["name"])
    polling = item.get("polling")
    schema = item.get("schema", defaults.schema)
    if not isinstance(schema, dict):
        raise ValueError("schema must be an object")
    retry = item.get("retry")
    if retry is not None and not isinstance(retry, dict):
        raise ValueError("retry must be an object")
    if polling is not None and not isinstance(polling, dict):
        raise ValueError("polling must be an object")
    until = polling.get("until") if polling else None
    until_condition(item["name"], until)   # raises ValueError listing the problems
    volatile = item.get("volatile_paths", [])
    if not isinstance(volatile, list) or not all(isinstance(v, str) and v for v in volatile):
        raise ValueError("volatile_paths must be a list of dotted paths")
    return CapabilitySpec(
        name=item["name"], kind=Kind.SIMULATED, version=int(item.get("version", 1)),
        description=str(item.get("description", "")), schema=schema,
        max_argument_bytes=int(item.get("max_argument_bytes", defaults.max_argument_bytes)),
        timeout_s=float(item.get("timeout_s", defaults.timeout_s)),
        retry=RetryPolicy.from_dict(retry) if retry is not None else defaults.retry,
        side_effect=SideEffect(item.get("side_effect", "none")),
        requires_approval=_flag(item, "requires_approval"), idempotent=_flag(item, "idempotent"),
        status_lookup=_flag(item, "status_lookup"), permission=str(item.get("permission", "")),
        polling=PollingPolicy(int(polling["max_attempts"]), float(polling["interval_s"]), until) if polling else None,
        enabled=bool(item.get("enabled", True)), volatile_paths=tuple(volatile),
        distinct_calls=_flag(item, "distinct_calls"), settle_s=_settle_s(item))


def _settle_s(item: dict[str, Any]) -> float | None:
    value = item.get("settle_s")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 86_400:
        raise ValueError("settle_s must be a number of seconds from 0 to 86400")
    return float(value)


def _flag(item: dict[str, Any], key: str) -> bool:
    value = item.get(key, False)
    if not isinstance(value, bool):
        raise ValueError(f"{key} must be true or false")
    return value


def _responses(items: Any, where: str, problems: list[str]) -> list[dict[str, Any]]:
    if not isinstance(items, list):
        problems.append(f"{where}: responses must be a list")
        return []
    for i, r in enumerate(items):
        at = f"{where} responses[{i}]"
        if not isinstance(r, dict):
            problems.append(f"{at} must be an object")
            continue
        unknown = set(r) - RESPONSE_FIELDS
        if unknown:
            problems.append(f"{at}: unknown fields {', '.join(sorted(unknown))}")
        kinds = [k for k in ("raise", "http_status", "commit_then_timeout", "commit_late_s") if k in r]
        if "return" in r and "commit_then_timeout" not in r and "commit_late_s" not in r:
            kinds.append("return")
        if len(kinds) != 1:
            problems.append(f"{at} needs exactly one of return, raise, http_status, commit_then_timeout, "
                            "commit_late_s")
        if "raise" in r and r["raise"] not in RAISABLE:
            problems.append(f"{at}: raise must be one of {', '.join(RAISABLE)}")
        if "http_status" in r and (not isinstance(r["http_status"], int) or not 100 <= r["http_status"] <= 599):
            problems.append(f"{at}: http_status must be an HTTP status code")
        if "commit_then_timeout" in r and (r["commit_then_timeout"] is not True or "return" not in r):
            problems.append(f"{at}: commit_then_timeout must be true and come with a return")
        if "commit_late_s" in r and "return" not in r:
            problems.append(f"{at}: commit_late_s must come with a return")
        if "deduplicated" in r and (r["deduplicated"] is not True or "return" not in r):
            problems.append(f"{at}: deduplicated must be true and come with a return")
        for key in ("latency_s", "retry_after_s", "commit_late_s"):
            if key in r and (isinstance(r[key], bool) or not isinstance(r[key], (int, float)) or r[key] < 0):
                problems.append(f"{at}: {key} must be a non-negative number")
    return [r for r in items if isinstance(r, dict)]


# -- running ----------------------------------------------------------------------------

@dataclass
class ScenarioRig:
    """A scenario wired to the real controller, before it runs: step it by hand or run it."""

    scenario: Scenario
    mode: str
    controller: Controller
    clock: SimulatedClock
    executor: SimulatedCapabilities
    approvals: ScriptedApprovals
    state: RunState


def prepare_scenario(scenario: Scenario | str | Path | dict[str, Any], mode: str = "planning",
                     ids: Any = None) -> ScenarioRig:
    if not isinstance(scenario, Scenario):
        scenario = load_scenario(scenario)
    if mode not in MODES:
        raise ScenarioError(scenario.source, [f"mode must be one of {', '.join(MODES)}"])
    if scenario.registered:
        raise ScenarioError(scenario.source, ['capabilities "registered" run against the application\'s registry: '
                                              "use the evaluation runner (manage.py evaluate)"])
    if mode == "direct" and scenario.direct is None:
        raise ScenarioError(scenario.source, ["direct mode needs a \"direct\" step in the scenario"])
    clock = SimulatedClock(0.0)
    executor = SimulatedCapabilities(scenario.responses, clock)
    approvals = ScriptedApprovals(scenario.approvals)
    if mode == "direct":
        assert scenario.direct is not None  # refused above
        planner: Any = DirectPlanner(scenario.direct["capability"], scenario.direct.get("arguments", {}))
    else:
        planner = ScriptedPlanner(list(scenario.plans))
    controller = Controller(StaticRegistry(scenario.capabilities), executor, planner, clock,
                            StaticAuthorizer(scenario.owner_permissions), approvals,
                            rng=random.Random(scenario.seed), ids=ids or RandomIds(),
                            approval_ttl_s=scenario.approval_ttl_s)
    slug = re.sub(r"[^a-z0-9]+", "-", scenario.name.lower()).strip("-") or "scenario"
    state = RunState.new(run_id=f"scenario-{slug}", goal=scenario.goal, completion=scenario.completion,
                         budgets=scenario.budgets, started_at=clock.now(), trace_id=f"trace-{slug}",
                         require_plan_approval=scenario.require_plan_approval, allow_replan=mode != "direct")
    return ScenarioRig(scenario, mode, controller, clock, executor, approvals, state)


def run_scenario(scenario: Scenario | str | Path | dict[str, Any], mode: str = "planning") -> ScenarioResult:
    """Run a scenario through the real controller until it is terminal or awaits an approval."""
    rig = prepare_scenario(scenario, mode, ids=SequentialIds("a"))
    events: list[Event] = []

    def collect(transition: Transition) -> None:
        events.extend(transition.events)

    state = rig.controller.run_until_pause(rig.state, on_transition=collect)
    while let_expire(rig, state):
        state = rig.controller.run_until_pause(state, on_transition=collect)
    return scenario_result(rig.scenario, state, events, rig.executor.eventual_commits(), rig.clock.now() - state.started_at,
                           rig.mode)


def let_expire(rig: ScenarioRig, state: RunState) -> bool:
    """A request the script leaves to expire: move the clock to its expiry and say so, so
    the caller advances the run again (production's scheduler sweep does the same)."""
    request = state.pending_approval
    if state.is_terminal or request is None or request.expires_at is None or not rig.approvals.expiring(request):
        return False
    rig.clock.advance(request.expires_at - rig.clock.now())
    return True


def scenario_result(scenario: Scenario, state: RunState, events: list[Event], commits: int, elapsed_s: float,
                    mode: str = "planning") -> ScenarioResult:
    actual: dict[str, Any] = {
        "status": state.status.value, "stop_reason": state.stop_reason, "tool_calls": state.usage.tool_calls,
        "revisions": state.usage.plans, "retries": state.usage.retries,
        "approvals_requested": sum(isinstance(e, ApprovalRequested) for e in events),
        "side_effects_committed": commits, "tokens": state.usage.tokens, "elapsed_s": round(elapsed_s, 6),
        "stall_kind": state.stall_kind,
    }
    failures = [f"expected {key}={json.dumps(expected)}, got {json.dumps(actual[key])}"
                for key, expected in scenario.expect.items() if not _matches(expected, actual[key])]
    return ScenarioResult(name=scenario.name, passed=not failures, failures=failures, mode=mode, state=state,
                          events=events, **actual)


def _matches(expected: Any, actual: Any) -> bool:
    numbers = (int, float)
    if isinstance(expected, numbers) and isinstance(actual, numbers) and not isinstance(expected, bool):
        return math.isclose(expected, actual, rel_tol=1e-9, abs_tol=1e-6)
    return bool(expected == actual)
