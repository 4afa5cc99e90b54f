"""A recorded run as a scenario file (design.md "Scenario files"): incidents become test cases.

The scenario's capability responses are the recorded observations, in the order each
capability answered; its planner plays back the recorded revisions; its approvals are
the recorded decisions. Running it drives the same controller, so it reproduces the
run's decisions and stop reason, and a reviewer can change one response to see what
the runtime would have decided instead.

Pure: the Django side (runs.scenario_export) and scenario results (`record_from_events`)
turn what they hold into the plain records below.

What a recording cannot carry, and how it is exported:
- a call whose side effect stayed unknown (nothing resolved it) is exported as a plain
  timeout, i.e. not committed;
- a call the callee deduplicated is recorded as a `"deduplicated": true` response, which
  the simulated capability consumes while it answers with the first result (it remembers
  what committed); a status lookup takes no response;
- real time between calls (planning, overhead) is not on the simulated clock: only the
  recorded call latencies are, so a run stopped by its deadline may replay differently.
"""
from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from . import events as ev
from .capability import CapabilitySpec
from .observation import ErrorCode, error_code_for_http_status
from .stop import ReplanReason

# One HTTP status per error code that has one, so a failure's body is replayed with it.
HTTP_STATUS_FOR = {"timeout": 504, "rate_limited": 429, "server_error": 500, "permission_denied": 403,
                   "not_found": 404, "invalid_arguments": 422, "conflict": 409}
RAISABLE = {c.value for c in ErrorCode} - {ErrorCode.OUTCOME_UNKNOWN.value}


@dataclass(frozen=True)
class RecordedPlan:
    revision: int
    steps: tuple[dict[str, Any], ...]
    accepted: bool = True
    tokens: int = 0
    cost: float = 0.0
    reason_code: str = ""
    reason: str = ""
    planner_output: str = ""


@dataclass(frozen=True)
class RecordedAttempt:
    capability: str
    kind: str                      # call | retry | poll | resolve (a re-send) | lookup
    idempotency_key: str | None
    status: str                    # ok | retryable | terminal
    error_code: str = ""
    output: Any = None
    state_changed: bool = False
    side_effect: str = "not_committed"
    latency_s: float = 0.0
    retry_after_s: float | None = None
    http_status: int | None = None   # part of a failure's fingerprint


@dataclass(frozen=True)
class RecordedApproval:
    approve: bool
    comment: str = ""
    expired: bool = False   # nobody decided: the request lapsed


def record_from_events(events: Iterable[Any]) -> tuple[list[RecordedPlan], list[RecordedAttempt],
                                                        list[RecordedApproval]]:
    """The records in a list of controller events (a scenario's result, a transition log)."""
    plans, attempts, approvals, decided = [], [], [], set()
    stop_reason = None
    for event in events:
        if isinstance(event, ev.PlanProposed):
            plans.append(RecordedPlan(event.revision, tuple(event.steps), event.accepted, event.tokens, event.cost,
                                      event.reason_code or "", event.reason, event.planner_output))
        elif isinstance(event, ev.AttemptFinished):
            o = event.observation
            attempts.append(RecordedAttempt(
                event.capability, event.kind, event.idempotency_key, o.status.value,
                o.error_code.value if o.error_code else "", o.output, o.state_changed, o.side_effect.value,
                o.latency_s, o.retry_after_s, o.extra.get("http_status")))
        elif isinstance(event, ev.ApprovalDecided) and event.request.key not in decided:
            decided.add(event.request.key)
            approvals.append(RecordedApproval(event.decision.approved, event.decision.comment))
        elif isinstance(event, ev.RunStopped):
            stop_reason = event.stop_reason
    if stop_reason == "approval_expired":
        approvals.append(RecordedApproval(False, expired=True))
    return plans, attempts, approvals


def capability_entry(spec: CapabilitySpec) -> dict[str, Any]:
    """A capability's policy in the scenario format (its kind becomes simulated)."""
    entry: dict[str, Any] = {
        "name": spec.name, "version": spec.version, "description": spec.description,
        "side_effect": spec.side_effect.value, "schema": spec.schema, "max_argument_bytes": spec.max_argument_bytes,
        "timeout_s": spec.timeout_s, "retry": spec.retry.to_dict(), "requires_approval": spec.requires_approval,
        "idempotent": spec.idempotent, "status_lookup": spec.status_lookup, "permission": spec.permission,
        "enabled": spec.enabled,
    }
    if spec.polling is not None:
        entry["polling"] = {"max_attempts": spec.polling.max_attempts, "interval_s": spec.polling.interval_s}
        if spec.polling.until is not None:
            entry["polling"]["until"] = spec.polling.until
    if spec.volatile_paths:
        entry["volatile_paths"] = list(spec.volatile_paths)
    if spec.distinct_calls:
        entry["distinct_calls"] = True
    if spec.settle_s is not None:
        entry["settle_s"] = spec.settle_s
    return entry


def responses_from_attempts(attempts: Iterable[RecordedAttempt],
                            specs: dict[str, CapabilitySpec]) -> tuple[dict[str, list[dict[str, Any]]], int]:
    """Each capability's responses in order, and how many of them commit a side effect."""
    responses: dict[str, list[dict[str, Any]]] = {name: [] for name in specs}
    last_unknown: dict[str, dict[str, Any]] = {}   # idempotency key -> its timeout response, until resolved
    committed: set[str] = set()
    commits = 0
    for attempt in attempts:
        spec = specs.get(attempt.capability)
        if spec is None:
            continue
        key = attempt.idempotency_key
        writes = spec.changes_state
        if attempt.kind in ("resolve", "lookup") and key in last_unknown and (
                attempt.kind == "lookup" or not spec.idempotent
                or (attempt.status == "ok" and attempt.side_effect == "committed")):
            # A status lookup, or a re-send that found the side effect done: the earlier
            # call committed (or not); the simulated callee answers the resolve itself.
            timed_out = last_unknown.pop(key)
            if attempt.status == "ok" and attempt.side_effect == "committed":
                timed_out.pop("raise", None)
                timed_out.update({"commit_then_timeout": True, "return": attempt.output})
                committed.add(key)
                commits += 1
            continue
        response = _response(attempt)
        if spec.idempotent and writes and key is not None and key in committed and attempt.status == "ok":
            # Deduplicated by the callee: recorded (every call has its response), while the
            # simulated capability answers it with the first result.
            responses[spec.name].append({**response, "deduplicated": True})
            continue
        responses[spec.name].append(response)
        if writes and attempt.side_effect == "unknown" and key is not None:
            last_unknown[key] = response
        elif writes and attempt.status == "ok":
            commits += 1
            if key is not None:
                committed.add(key)
    return responses, commits


def _response(attempt: RecordedAttempt) -> dict[str, Any]:
    latency = {"latency_s": attempt.latency_s} if attempt.latency_s else {}
    if attempt.status == "ok":
        return {"return": attempt.output, "state_changed": attempt.state_changed, **latency}
    code = attempt.error_code if attempt.error_code in RAISABLE else "timeout"
    extra = {"retry_after_s": attempt.retry_after_s} if attempt.retry_after_s is not None else {}
    if attempt.http_status is not None and error_code_for_http_status(attempt.http_status) is not None:
        # The HTTP status is part of a failure's fingerprint: replay the same one.
        return {"http_status": attempt.http_status, "body": attempt.output, **latency, **extra}
    if attempt.output is not None and code in HTTP_STATUS_FOR:
        # A body without a status: replay it with a status of that code.
        return {"http_status": HTTP_STATUS_FOR[code], "body": attempt.output, **latency, **extra}
    return {"raise": code, **latency, **extra}


def planner_entry(plan: RecordedPlan) -> dict[str, Any]:
    """One revision as the scripted planner proposes it."""
    steps: Any = [dict(s) for s in plan.steps]
    if not plan.accepted:
        # A rejected plan is replayed as the planner wrote it (the parsed steps may have lost the fault).
        try:
            raw = json.loads(plan.planner_output) if plan.planner_output else None
        except (TypeError, ValueError):
            raw = None
        if isinstance(raw, dict) and "steps" in raw:
            raw = raw["steps"]
        if isinstance(raw, list):
            steps = raw
    entry: dict[str, Any] = {"steps": steps, "tokens": plan.tokens, "cost": plan.cost}
    if plan.reason_code in {r.value for r in ReplanReason} - {ReplanReason.PLAN_REJECTED.value}:
        entry["reason_code"] = plan.reason_code
    if plan.reason:
        entry["reason"] = plan.reason
    return entry


def scenario_from_record(*, name: str, goal: str, completion: dict[str, Any] | None, budgets: dict[str, Any],
                         capabilities: Iterable[CapabilitySpec], plans: Iterable[RecordedPlan],
                         attempts: Iterable[RecordedAttempt], approvals: Iterable[RecordedApproval],
                         owner_permissions: list[str] | None = None, require_plan_approval: bool = False,
                         seed: int = 0, expect: dict[str, Any] | None = None, description: str = "",
                         approval_ttl_s: float | None = None) -> dict[str, Any]:
    """The scenario file (a dict, ready for json.dumps) that replays the record."""
    specs = {s.name: s for s in capabilities}
    responses, commits = responses_from_attempts(attempts, specs)
    scenario: dict[str, Any] = {
        "name": name, "description": description, "goal": goal, "completion": completion, "budgets": budgets,
        "capabilities": [{**capability_entry(spec), "responses": responses[spec.name]} for spec in specs.values()],
        "planner": {"plans": [planner_entry(p) for p in sorted(plans, key=lambda p: p.revision)]},
        "approvals": [{"decision": "expire"} if a.expired else
                      {"decision": "approve" if a.approve else "reject", "comment": a.comment} for a in approvals],
        "require_plan_approval": require_plan_approval, "seed": seed,
    }
    if approval_ttl_s is not None:
        scenario["approval_ttl_s"] = approval_ttl_s
    if owner_permissions is not None:
        scenario["owner_permissions"] = sorted(owner_permissions)
    if completion is None:
        del scenario["completion"]
    expected = dict(expect or {})
    if "side_effects_committed" in expected:
        # What the simulated capabilities will commit: an unknown outcome is exported as not committed.
        expected["side_effects_committed"] = commits
    scenario["expect"] = expected
    return scenario
