"""What the controller emits, as it happens, for the persistence adapter to record."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .approvals import ApprovalDecision, ApprovalRequest
from .observation import Observation
from .plan import PlanError


@dataclass(frozen=True)
class PlanProposed:
    revision: int
    steps: tuple[dict[str, Any], ...]
    accepted: bool
    validation_errors: tuple[PlanError, ...] = ()
    reason_code: str | None = None
    reason: str = ""
    triggering_attempt_id: str | None = None
    # {"added": [...], "removed": [...], "changed": [...], "summary": "..."} vs the previous accepted plan.
    changes: dict[str, Any] = field(default_factory=dict)
    tokens: int = 0
    cost: float = 0.0
    planner_output: str = ""
    capabilities_seen: tuple[str, ...] = ()
    needs_plan_approval: bool = False
    plan_hash: str = ""
    # When the planner was asked and when it answered (the run's clock): the planner
    # call's span in an OpenTelemetry export. 0.0 when unknown.
    started_at: float = 0.0
    ended_at: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"type": "plan_proposed", "revision": self.revision, "steps": list(self.steps),
                "accepted": self.accepted, "validation_errors": [e.to_dict() for e in self.validation_errors],
                "reason_code": self.reason_code, "reason": self.reason,
                "triggering_attempt_id": self.triggering_attempt_id, "changes": self.changes,
                "tokens": self.tokens, "cost": self.cost, "planner_output": self.planner_output,
                "capabilities_seen": list(self.capabilities_seen), "needs_plan_approval": self.needs_plan_approval,
                "plan_hash": self.plan_hash, "started_at": self.started_at, "ended_at": self.ended_at}


@dataclass(frozen=True)
class AttemptFinished:
    attempt_id: str
    revision: int
    step_id: str
    step_index: int
    capability: str
    capability_version: int
    version_id: int | None
    arguments: dict[str, Any]
    attempt: int              # attempt number within the step, the first is 1
    kind: str                 # call | retry | poll | resolve (re-send) | lookup (status lookup)
    signature: str
    idempotency_key: str | None
    started_at: float
    ended_at: float
    observation: Observation
    repeated_without_progress: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"type": "attempt_finished", "attempt_id": self.attempt_id, "revision": self.revision,
                "step_id": self.step_id, "step_index": self.step_index, "capability": self.capability,
                "capability_version": self.capability_version, "version_id": self.version_id,
                "arguments": self.arguments, "attempt": self.attempt, "kind": self.kind,
                "signature": self.signature, "idempotency_key": self.idempotency_key,
                "started_at": self.started_at, "ended_at": self.ended_at,
                "observation": self.observation.to_dict(),
                "repeated_without_progress": self.repeated_without_progress}


@dataclass(frozen=True)
class DecisionMade:
    attempt_id: str | None
    decision: str
    reason: str
    usage: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {"type": "decision_made", "attempt_id": self.attempt_id, "decision": self.decision,
                "reason": self.reason, "usage": self.usage}


@dataclass(frozen=True)
class ApprovalRequested:
    request: ApprovalRequest
    arguments: dict[str, Any] | None = None      # kind == "step": what the operator approves
    steps: tuple[dict[str, Any], ...] = ()      # kind == "plan"

    def to_dict(self) -> dict[str, Any]:
        return {"type": "approval_requested", "request": self.request.to_dict(), "arguments": self.arguments,
                "steps": list(self.steps)}


@dataclass(frozen=True)
class ApprovalDecided:
    request: ApprovalRequest
    decision: ApprovalDecision

    def to_dict(self) -> dict[str, Any]:
        return {"type": "approval_decided", "request": self.request.to_dict(), **self.decision.to_dict()}


@dataclass(frozen=True)
class StatusChanged:
    status: str

    def to_dict(self) -> dict[str, Any]:
        return {"type": "status_changed", "status": self.status}


@dataclass(frozen=True)
class RunStopped:
    stop_reason: str
    detail: str
    attempt_id: str | None = None
    stall_kind: str | None = None     # stalled only: repeated_without_progress | planner_exhausted

    def to_dict(self) -> dict[str, Any]:
        return {"type": "run_stopped", "stop_reason": self.stop_reason, "detail": self.detail,
                "attempt_id": self.attempt_id, "stall_kind": self.stall_kind}


@dataclass(frozen=True)
class PlannerCallEnded:
    """A written-ahead planner call is accounted for: answered in this pass, or lost with the worker
    that made it and counted by the one that resumed the run (`lost`), at the answer's figures or,
    when the answer never came, at the call's ceiling (`estimated`)."""

    call_id: str
    revision: int
    started_at: float
    ended_at: float
    tokens: int
    cost: float
    lost: bool = False
    estimated: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"type": "planner_call_ended", "call_id": self.call_id, "revision": self.revision,
                "started_at": self.started_at, "ended_at": self.ended_at, "tokens": self.tokens,
                "cost": self.cost, "lost": self.lost, "estimated": self.estimated}


Event = (PlanProposed | AttemptFinished | DecisionMade | ApprovalRequested | ApprovalDecided | StatusChanged
         | RunStopped | PlannerCallEnded)
