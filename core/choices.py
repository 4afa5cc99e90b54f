"""Closed sets stored in the database, generated from the runtime's own enums.

The runtime (pure Python) owns the vocabulary; the database stores it with CHECK
constraints. Building the TextChoices from the runtime enums keeps one list.
"""
from django.db import models

from runs.runtime.budgets import BudgetName as _BudgetName
from runs.runtime.capability import SideEffect as _SideEffect
from runs.runtime.decide import Decision as _Decision
from runs.runtime.observation import ErrorCategory as _ErrorCategory
from runs.runtime.observation import ErrorCode as _ErrorCode
from runs.runtime.observation import SideEffectStatus as _SideEffectStatus
from runs.runtime.observation import Status as _Status
from runs.runtime.stop import ReplanReason as _ReplanReason
from runs.runtime.stop import RunStatus as _RunStatus
from runs.runtime.stop import StallKind as _StallKind


def _spaced(value: str) -> str:
    return value.replace("_", " ")


def _worded(value: str) -> str:
    """A one-word value capitalised, as Django labels a member; a longer one spelled out in lower case."""
    return _spaced(value) if "_" in value else value.capitalize()


def _choices(name: str, values, label=_spaced) -> type[models.TextChoices]:
    return models.TextChoices(name, [(str(v).upper().replace(":", "_").replace("-", "_"), (str(v), label(str(v))))
                                     for v in values])


def values_of(choices: type[models.TextChoices]) -> list[str]:
    return [c.value for c in choices]


ObservationStatus = _choices("ObservationStatus", [s.value for s in _Status])
ErrorCode = _choices("ErrorCode", [c.value for c in _ErrorCode])
ErrorCategory = _choices("ErrorCategory", [c.value for c in _ErrorCategory])
SideEffectStatus = _choices("SideEffectStatus", [s.value for s in _SideEffectStatus])
SideEffect = _choices("SideEffect", [s.value for s in _SideEffect])

BUDGET_NAMES = tuple(b.value for b in _BudgetName)
STOP_REASON_VALUES = (
    ["completed"]
    + [f"budget_exhausted:{b}" for b in BUDGET_NAMES]
    + [f"terminal_failure:{c.value}" for c in _ErrorCode]
    + ["stalled", "plan_rejected", "approval_rejected", "approval_expired", "cancelled", "internal_error",
       "session_ended"]
)
StopReason = _choices("StopReason", STOP_REASON_VALUES)
# Recorded with stop_reason "stalled": which way the run stopped making progress.
StallKind = _choices("StallKind", [k.value for k in _StallKind])


RunStatus = _choices("RunStatus", [s.value for s in _RunStatus], label=_worded)


FINISHED_STATUSES = (RunStatus.COMPLETED, RunStatus.STOPPED, RunStatus.CANCELLED)

# "initial" marks the first plan, which answers no observation.
ReplanReason = _choices("ReplanReason", ["initial"] + [r.value for r in _ReplanReason])


class StepStatus(models.TextChoices):
    PENDING = "pending"
    RUNNING = "running"
    AWAITING_APPROVAL = "awaiting_approval", "awaiting approval"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    SKIPPED = "skipped"


class ApprovalState(models.TextChoices):
    NOT_REQUIRED = "not_required", "not required"
    PENDING = "pending"
    APPROVED = "approved"
    REJECTED = "rejected"
    EXPIRED = "expired"


class DecisionChannel(models.TextChoices):
    """Where a person decided an approval request: every channel decides through runs.services.approval_decide."""
    INBOX = "inbox"
    API = "api", "API"
    SLACK = "slack"
    EMAIL = "email", "e-mail"


class AttemptKind(models.TextChoices):
    CALL = "call"
    RETRY = "retry"
    POLL = "poll"
    RESOLVE = "resolve", "re-send"
    LOOKUP = "lookup", "status lookup"


DecisionKind = _choices("DecisionKind", [d.value for d in _Decision])


class ApprovalKind(models.TextChoices):
    STEP = "step"
    PLAN = "plan"
