"""RunState: the controller's checkpoint between passes.

It is everything the next pass needs, with bounded size: a run with thousands of
attempts keeps only the recent history window, the current revision's steps and
the counters. Full traces live in the events the adapter records.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from .approvals import ApprovalRequest
from .budgets import Budgets, Usage
from .completion import CompletionCriteria
from .history import AttemptKind, HistoryEntry
from .plan import PlanError, Step
from .records import memo_dict, replace
from .stop import RunStatus


class StepStatus(StrEnum):
    """A plan step's status. The pure runtime moves a step from pending to succeeded or failed;
    the stored step row also shows it running, awaiting approval, or skipped by a new revision."""

    PENDING = "pending"
    RUNNING = "running"
    AWAITING_APPROVAL = "awaiting_approval"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    SKIPPED = "skipped"


@dataclass(frozen=True)
class StepProgress:
    step: Step
    index: int
    status: str = StepStatus.PENDING
    attempts: int = 0
    retries_used: int = 0   # since the last ok observation: the retry policy counts per call
    polls_used: int = 0
    next_kind: str = AttemptKind.CALL
    approved_arguments_hash: str | None = None
    committed: bool = False
    last_observation: dict[str, Any] | None = None   # a summary: status, error_code, side_effect, state_changed
    # A call whose outcome is unknown and is to be looked up once it can no longer land
    # (resolution.UnsettledCall as a dict); None: nothing waits to settle.
    unsettled: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return memo_dict(self, self._as_dict)

    def _as_dict(self) -> dict[str, Any]:
        data = {
            "step": self.step.to_dict(), "index": self.index, "status": self.status,
            "attempts": self.attempts, "retries_used": self.retries_used, "polls_used": self.polls_used,
            "next_kind": self.next_kind, "approved_arguments_hash": self.approved_arguments_hash,
            "committed": self.committed, "last_observation": self.last_observation}
        if self.unsettled is not None:   # only then: checkpoints of every other step stay as they were
            data["unsettled"] = self.unsettled
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StepProgress:
        return cls(**{**data, "step": Step.from_dict(data["step"])})

    def progress_dict(self) -> dict[str, Any]:
        """to_dict() without the step and its index: what an adapter keeping them apart stores."""
        return {k: v for k, v in self.to_dict().items() if k not in ("step", "index")}


@dataclass(frozen=True)
class PlanningNeed:
    """Set when the next pass must ask the planner (first plan or a revision)."""

    reason_code: str | None = None
    reason: str = ""
    trigger_attempt_id: str | None = None
    validation_errors: tuple[PlanError, ...] = ()
    rejected_plan: Any = None   # the raw plan being corrected, when reason_code == plan_rejected

    def to_dict(self) -> dict[str, Any]:
        return {"reason_code": self.reason_code, "reason": self.reason,
                "trigger_attempt_id": self.trigger_attempt_id,
                "validation_errors": [e.to_dict() for e in self.validation_errors],
                "rejected_plan": self.rejected_plan}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PlanningNeed:
        return cls(reason_code=data.get("reason_code"), reason=data.get("reason", ""),
                   trigger_attempt_id=data.get("trigger_attempt_id"),
                   validation_errors=tuple(PlanError.from_dict(e) for e in data.get("validation_errors") or ()),
                   rejected_plan=data.get("rejected_plan"))


@dataclass(frozen=True)
class PlanAwaitingApproval:
    revision: int
    steps: tuple[Step, ...]
    reason_code: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"revision": self.revision, "steps": [s.to_dict() for s in self.steps],
                "reason_code": self.reason_code}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PlanAwaitingApproval:
        return cls(revision=data["revision"], steps=tuple(Step.from_dict(s) for s in data["steps"]),
                   reason_code=data.get("reason_code"))


@dataclass(frozen=True)
class RunState:
    run_id: str
    goal: str
    completion: CompletionCriteria | None
    budgets: Budgets
    started_at: float
    trace_id: str = ""
    require_plan_approval: bool = False
    # False in "direct" mode: one single-step plan, no revisions.
    allow_replan: bool = True
    # Without completion criteria, does a plan whose every step succeeded complete the run? Not for
    # a gateway session: its agent's next call is the next plan, and its end ends the run.
    plan_success_completes: bool = True
    # Set by the adapter on load when an operator cancelled; honoured at the next pass.
    cancel_requested: bool = False
    status: RunStatus = RunStatus.QUEUED
    stop_reason: str | None = None
    stop_detail: str = ""
    stall_kind: str | None = None              # set when the run stopped StopKind.STALLED
    usage: Usage = Usage()
    revision: int = 0                          # the accepted plan's revision number; 0 before any
    steps: tuple[StepProgress, ...] = ()
    planning: PlanningNeed | None = None
    plan_awaiting_approval: PlanAwaitingApproval | None = None
    pending_approval: ApprovalRequest | None = None
    consecutive_rejections: int = 0
    history: tuple[HistoryEntry, ...] = ()
    # Latest ok output of the completion criteria's capability: all the completion check needs.
    latest_ok_outputs: dict[str, Any] = field(default_factory=dict)
    not_before: float | None = None            # earliest time of the next action (backoff, poll, Retry-After)
    last_attempt_id: str | None = None
    # A fork of another run (runtime/fork.py): idempotency keys are scoped by the first run of the
    # line ("" = this run), so the same action keeps its key across forks; and the keys of side
    # effects committed before the fork point, which this run never sends again.
    key_scope: str = ""
    settled_keys: tuple[str, ...] = ()

    @classmethod
    def new(cls, *, run_id: str, goal: str, completion: CompletionCriteria | dict[str, Any] | None,
            budgets: Budgets | dict[str, Any] | None = None, started_at: float, trace_id: str = "",
            require_plan_approval: bool = False, allow_replan: bool = True,
            plan_success_completes: bool = True) -> RunState:
        if isinstance(completion, dict):
            completion = CompletionCriteria.from_dict(completion)
        if not isinstance(budgets, Budgets):
            budgets = Budgets.from_dict(budgets)
        return cls(run_id=run_id, goal=goal, completion=completion, budgets=budgets, started_at=started_at,
                   trace_id=trace_id or run_id, require_plan_approval=require_plan_approval,
                   allow_replan=allow_replan, plan_success_completes=plan_success_completes,
                   planning=PlanningNeed(reason="first plan"))

    @property
    def is_terminal(self) -> bool:
        return self.status.is_terminal

    def step_progress(self, step_id: str) -> StepProgress | None:
        return next((p for p in self.steps if p.step.id == step_id), None)

    def with_step(self, progress: StepProgress) -> RunState:
        return replace(self, steps=tuple(progress if p.step.id == progress.step.id else p for p in self.steps))

    def to_dict(self, *, steps: bool = True) -> dict[str, Any]:
        """The checkpoint as JSON. steps=False leaves the steps' progress out, for an adapter that keeps
        each step's progress apart (with the step) so a pass writes only the steps it changed."""
        return {
            "run_id": self.run_id, "goal": self.goal,
            "completion": self.completion.to_dict() if self.completion else None,
            "budgets": self.budgets.to_dict(), "started_at": self.started_at, "trace_id": self.trace_id,
            "require_plan_approval": self.require_plan_approval, "allow_replan": self.allow_replan,
            "plan_success_completes": self.plan_success_completes,
            "cancel_requested": self.cancel_requested, "status": self.status.value,
            "stop_reason": self.stop_reason, "stop_detail": self.stop_detail, "stall_kind": self.stall_kind,
            "usage": self.usage.to_dict(),
            "revision": self.revision, **({"steps": [p.to_dict() for p in self.steps]} if steps else {}),
            "planning": self.planning.to_dict() if self.planning else None,
            "plan_awaiting_approval": self.plan_awaiting_approval.to_dict() if self.plan_awaiting_approval else None,
            "pending_approval": self.pending_approval.to_dict() if self.pending_approval else None,
            "consecutive_rejections": self.consecutive_rejections,
            "history": [h.to_dict() for h in self.history],
            "latest_ok_outputs": self.latest_ok_outputs, "not_before": self.not_before,
            "last_attempt_id": self.last_attempt_id,
            # Only for a fork: every other run's checkpoint stays as it was.
            **({"key_scope": self.key_scope} if self.key_scope else {}),
            **({"settled_keys": list(self.settled_keys)} if self.settled_keys else {}),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunState:
        def opt(key: str, conv: Any) -> Any:
            return conv(data[key]) if data.get(key) is not None else None
        return cls(
            run_id=data["run_id"], goal=data["goal"], completion=opt("completion", CompletionCriteria.from_dict),
            budgets=Budgets.from_dict(data["budgets"]), started_at=float(data["started_at"]),
            trace_id=data.get("trace_id", ""), require_plan_approval=bool(data.get("require_plan_approval")),
            allow_replan=bool(data.get("allow_replan", True)),
            plan_success_completes=bool(data.get("plan_success_completes", True)),
            cancel_requested=bool(data.get("cancel_requested")),
            status=RunStatus(data.get("status", "queued")), stop_reason=data.get("stop_reason"),
            stop_detail=data.get("stop_detail", ""), stall_kind=data.get("stall_kind"), usage=Usage.from_dict(data.get("usage")),
            revision=int(data.get("revision", 0)),
            steps=tuple(StepProgress.from_dict(p) for p in data.get("steps") or ()),
            planning=opt("planning", PlanningNeed.from_dict),
            plan_awaiting_approval=opt("plan_awaiting_approval", PlanAwaitingApproval.from_dict),
            pending_approval=opt("pending_approval", ApprovalRequest.from_dict),
            consecutive_rejections=int(data.get("consecutive_rejections", 0)),
            history=tuple(HistoryEntry.from_dict(h) for h in data.get("history") or ()),
            latest_ok_outputs=dict(data.get("latest_ok_outputs") or {}),
            not_before=data.get("not_before"), last_attempt_id=data.get("last_attempt_id"),
            key_scope=data.get("key_scope") or "", settled_keys=tuple(data.get("settled_keys") or ()),
        )
