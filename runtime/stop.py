"""The closed vocabularies of a run: statuses, stop reasons, replan reasons."""
from __future__ import annotations

from enum import StrEnum


class RunStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    AWAITING_APPROVAL = "awaiting_approval"
    COMPLETED = "completed"
    STOPPED = "stopped"
    CANCELLED = "cancelled"

    @property
    def is_terminal(self) -> bool:
        return self in (RunStatus.COMPLETED, RunStatus.STOPPED, RunStatus.CANCELLED)


class StopKind(StrEnum):
    """The stop reason's kind; budget and terminal failures carry a suffix."""

    COMPLETED = "completed"
    BUDGET_EXHAUSTED = "budget_exhausted"
    TERMINAL_FAILURE = "terminal_failure"
    STALLED = "stalled"
    PLAN_REJECTED = "plan_rejected"
    APPROVAL_REJECTED = "approval_rejected"
    APPROVAL_EXPIRED = "approval_expired"
    CANCELLED = "cancelled"
    INTERNAL_ERROR = "internal_error"
    # The agent's session ended (an MCP client closed it or went idle) while the run waited
    # for its next call: not "completed", which only verified completion criteria earn.
    SESSION_ENDED = "session_ended"


class StallKind(StrEnum):
    """Why a run stalled: the same action kept giving the same outcome, or the planner
    had nothing (more) to offer."""

    REPEATED_WITHOUT_PROGRESS = "repeated_without_progress"
    PLANNER_EXHAUSTED = "planner_exhausted"


class ReplanReason(StrEnum):
    DEPENDENCY_FAILED = "dependency_failed"
    NEW_INFORMATION = "new_information"
    RESULT_NOT_FOUND = "result_not_found"
    STEP_UNNECESSARY = "step_unnecessary"
    PATH_BLOCKED = "path_blocked"
    PLAN_REJECTED = "plan_rejected"


def stop_reason(kind: StopKind | str, qualifier: str | None = None) -> str:
    """"budget_exhausted:deadline", "terminal_failure:timeout", "stalled"..."""
    kind = StopKind(kind)
    needs_qualifier = kind in (StopKind.BUDGET_EXHAUSTED, StopKind.TERMINAL_FAILURE)
    if needs_qualifier != bool(qualifier):
        raise ValueError(f"stop reason {kind} {'needs' if needs_qualifier else 'takes no'} qualifier")
    return f"{kind.value}:{qualifier}" if qualifier else kind.value


def stop_kind(reason: str) -> StopKind:
    return StopKind(reason.split(":", 1)[0])


def status_for_stop(kind: StopKind) -> RunStatus:
    if kind is StopKind.COMPLETED:
        return RunStatus.COMPLETED
    if kind is StopKind.CANCELLED:
        return RunStatus.CANCELLED
    return RunStatus.STOPPED
