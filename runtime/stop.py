"""The closed vocabularies of a run: statuses, stop reasons, replan reasons."""
from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from .budgets import BudgetName
from .observation import ErrorCode


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
    # The project's quota for the day was reached: a limit shared by the project's runs, not the run's own.
    QUOTA_EXHAUSTED = "quota_exhausted"


class QuotaName(StrEnum):
    """The per-day quotas a project may set (the stop reason's qualifier)."""

    RUNS_PER_DAY = "runs_per_day"
    TOKENS_PER_DAY = "tokens_per_day"
    COST_PER_DAY = "cost_per_day"


class StallKind(StrEnum):
    """Why a run stalled: the same action kept giving the same outcome, or the planner
    had nothing (more) to offer."""

    REPEATED_WITHOUT_PROGRESS = "repeated_without_progress"
    PLANNER_EXHAUSTED = "planner_exhausted"

    @classmethod
    def in_detail(cls, detail: str) -> StallKind | None:
        """The stall kind a stalled run's stop detail names: "<kind>: why..." as the runtime writes
        it, or, for a run recorded before runs stored the kind, the words the runtime used then."""
        head = detail.partition(":")[0]
        if head in {kind.value for kind in cls}:
            return cls(head)
        return next((kind for kind, words in _STALL_WORDS.items() if any(w in detail for w in words)), None)


# What a stop detail said of each stall kind before it opened with the kind.
_STALL_WORDS = {
    StallKind.REPEATED_WITHOUT_PROGRESS: ("repeated with the same outcome",),
    StallKind.PLANNER_EXHAUSTED: ("no further plan", "proposed no plan", "does not replan"),
}


class ReplanReason(StrEnum):
    DEPENDENCY_FAILED = "dependency_failed"
    NEW_INFORMATION = "new_information"
    RESULT_NOT_FOUND = "result_not_found"
    STEP_UNNECESSARY = "step_unnecessary"
    PATH_BLOCKED = "path_blocked"
    PLAN_REJECTED = "plan_rejected"


@dataclass(frozen=True)
class StopReason:
    """Why a run stopped, as a value: its kind and, for a budget or a terminal failure, which
    one ("budget_exhausted:deadline", "terminal_failure:timeout", "stalled"). The one parser
    and the one formatter of the stored text."""

    kind: StopKind
    detail: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", StopKind(self.kind))
        if (self.kind in _QUALIFIED) != bool(self.detail):
            raise ValueError(f"stop reason {self.kind} {'needs' if self.kind in _QUALIFIED else 'takes no'} qualifier")
        if self.kind is StopKind.BUDGET_EXHAUSTED:
            object.__setattr__(self, "detail", BudgetName(str(self.detail)))
        elif self.kind is StopKind.TERMINAL_FAILURE:
            object.__setattr__(self, "detail", ErrorCode(str(self.detail)))
        elif self.kind is StopKind.QUOTA_EXHAUSTED:
            object.__setattr__(self, "detail", QuotaName(str(self.detail)))

    @classmethod
    def parse(cls, text: str) -> StopReason:
        kind, _, detail = text.partition(_SEPARATOR)
        return cls(StopKind(kind), detail or None)

    @classmethod
    def of(cls, text: str | None) -> StopReason | None:
        """The stop reason a stored text holds; None for a run that has not stopped ("")."""
        return cls.parse(text) if text else None

    def __str__(self) -> str:
        return f"{self.kind.value}{_SEPARATOR}{self.detail}" if self.detail else self.kind.value

    @staticmethod
    def prefix(kind: str) -> str:
        """The start of every stored reason of this kind with a qualifier ("budget_exhausted:"):
        what a query for "any budget" matches."""
        return f"{kind}{_SEPARATOR}"

    @property
    def budget(self) -> BudgetName | None:
        """The budget that ran out, for a budget stop."""
        return BudgetName(self.detail) if self.kind is StopKind.BUDGET_EXHAUSTED and self.detail else None

    @classmethod
    def every(cls) -> tuple[StopReason, ...]:
        """Every stop reason there is: the closed set the database constrains stop_reason to."""
        return ((cls(StopKind.COMPLETED),)
                + tuple(cls(StopKind.BUDGET_EXHAUSTED, b) for b in BudgetName)
                + tuple(cls(StopKind.TERMINAL_FAILURE, c) for c in ErrorCode)
                + tuple(cls(StopKind.QUOTA_EXHAUSTED, q) for q in QuotaName)
                + tuple(cls(k) for k in StopKind if k not in _QUALIFIED and k is not StopKind.COMPLETED))


_SEPARATOR = ":"
_QUALIFIED = frozenset({StopKind.BUDGET_EXHAUSTED, StopKind.TERMINAL_FAILURE, StopKind.QUOTA_EXHAUSTED})


def stop_reason(kind: StopKind | str, qualifier: str | None = None) -> str:
    """The stored text of a stop reason."""
    return str(StopReason(StopKind(kind), qualifier))


def stop_kind(reason: str) -> StopKind:
    return StopReason.parse(reason).kind


def status_for_stop(kind: StopKind) -> RunStatus:
    if kind is StopKind.COMPLETED:
        return RunStatus.COMPLETED
    if kind is StopKind.CANCELLED:
        return RunStatus.CANCELLED
    return RunStatus.STOPPED
