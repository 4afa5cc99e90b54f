"""Closed sets stored in the database, generated from the runtime's own enums.

The runtime (pure Python) owns the vocabulary; the database stores it with CHECK
constraints. Building the TextChoices from the runtime enums keeps one list.
"""
from typing import Any

from django.db import models

from runtime.approvals import ApprovalKind as _ApprovalKind
from runtime.budgets import BudgetName as _BudgetName
from runtime.capability import Kind as _Kind
from runtime.capability import SideEffect as _SideEffect
from runtime.decide import Decision as _Decision
from runtime.history import AttemptKind as _AttemptKind
from runtime.observation import ErrorCategory as _ErrorCategory
from runtime.observation import ErrorCode as _ErrorCode
from runtime.observation import SideEffectStatus as _SideEffectStatus
from runtime.observation import Status as _Status
from runtime.state import StepStatus as _StepStatus
from runtime.stop import ReplanReason as _ReplanReason
from runtime.stop import RunStatus as _RunStatus
from runtime.stop import StallKind as _StallKind
from runtime.stop import StopReason as _StopReason


def _spaced(value: str) -> str:
    return value.replace("_", " ")


def _worded(value: str) -> str:
    """A one-word value capitalised, as Django labels a member; a longer one spelled out in lower case."""
    return _spaced(value) if "_" in value else value.capitalize()


def _choices(name: str, values, label=_spaced, labels: dict[str, str] | None = None) -> Any:
    """TextChoices from a runtime enum's values; `labels` words the few a person reads otherwise.
    (Any: a type checker cannot see the members of a class made at run time.)"""
    return models.TextChoices(name, [(str(v).upper().replace(":", "_").replace("-", "_"),
                                      (str(v), (labels or {}).get(str(v)) or label(str(v)))) for v in values])


def values_of(choices: type[models.TextChoices]) -> list[str]:
    return [c.value for c in choices]


ObservationStatus = _choices("ObservationStatus", [s.value for s in _Status])
ErrorCode = _choices("ErrorCode", [c.value for c in _ErrorCode])
ErrorCategory = _choices("ErrorCategory", [c.value for c in _ErrorCategory])
SideEffectStatus = _choices("SideEffectStatus", [s.value for s in _SideEffectStatus])
SideEffect = _choices("SideEffect", [s.value for s in _SideEffect])

BUDGET_NAMES = tuple(b.value for b in _BudgetName)
STOP_REASON_VALUES = tuple(str(r) for r in _StopReason.every())
StopReason = _choices("StopReason", STOP_REASON_VALUES)
# Recorded with stop_reason "stalled": which way the run stopped making progress.
StallKind = _choices("StallKind", [k.value for k in _StallKind])


RunStatus = _choices("RunStatus", [s.value for s in _RunStatus], label=_worded)


FINISHED_STATUSES = (RunStatus.COMPLETED, RunStatus.STOPPED, RunStatus.CANCELLED)
LIVE_STATUSES = tuple(s for s in RunStatus if s not in FINISHED_STATUSES)

# "initial" marks the first plan, which answers no observation.
ReplanReason = _choices("ReplanReason", ["initial"] + [r.value for r in _ReplanReason])


StepStatus = _choices("StepStatus", [s.value for s in _StepStatus], label=_worded)


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


AttemptKind = _choices("AttemptKind", [k.value for k in _AttemptKind], label=_worded,
                       labels={_AttemptKind.RESOLVE: "re-send", _AttemptKind.LOOKUP: "status lookup"})


DecisionKind = _choices("DecisionKind", [d.value for d in _Decision])


ApprovalKind = _choices("ApprovalKind", [k.value for k in _ApprovalKind], label=_worded)

# The kinds an operator registers (the simulated kind serves scenario files and suites only).
CapabilityKind = _choices("CapabilityKind", [k.value for k in _Kind if k is not _Kind.SIMULATED],
                          labels={_Kind.PYTHON: "Python function", _Kind.HTTP: "HTTP webhook",
                                  _Kind.MCP: "MCP server tool"})
